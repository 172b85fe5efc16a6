"""`registry_stats()`: the registry's headline numbers, cached per process with a single-flight refresh (docs/seo.md,
docs/scaling.md)."""

from __future__ import annotations

import time
from typing import Any

from app.kernel import db
from app.kernel.cache import SingleFlightCache
from app.kernel.config import settings
from app.kernel.sql import statement
from app.record.public import listed_repository, published_scan
from app.registry.models import Repository

_STATS_SQL = statement(
    """
    SELECT count(*) AS repositories,
           count(*) FILTER (WHERE status = 'unscanned') AS unscanned,
           coalesce(sum(open_findings_count), 0) AS open_findings,
           coalesce(sum(verified_findings_count), 0) AS verified_findings
    FROM repositories WHERE {listed}
    """,
    listed=listed_repository(Repository.__table__),
)

# contributors: accounts with a public or summary-only report, or a confirmation on one, on a listed repository
# (docs/domain.md §1.2, §7.2)
_CONTRIBUTORS_SQL = statement(
    """
    SELECT count(*) FROM (
      SELECT s.submitted_by_id AS account_id
      FROM scans s JOIN repositories r ON r.id = s.repository_id
      WHERE {listed} AND s.visibility IN ('public', 'public_summary') AND {published}
      UNION
      SELECT c.account_id
      FROM scan_confirmations c JOIN scans s ON s.id = c.scan_id JOIN repositories r ON r.id = s.repository_id
      WHERE {listed} AND s.visibility IN ('public', 'public_summary') AND {published}
    ) AS contributors
    """,
    listed=listed_repository(),
    published=published_scan(),
)


async def query_registry_stats() -> dict[str, int]:
    """The uncached computation (one short read session)."""
    async with db.read_session() as session:
        row = (await session.execute(_STATS_SQL)).mappings().one()
        contributors = (await session.execute(_CONTRIBUTORS_SQL)).scalar_one()
    return {
        "repositories": int(row["repositories"]),
        "unscanned": int(row["unscanned"]),
        "open_findings": int(row["open_findings"]),
        "verified_findings": int(row["verified_findings"]),
        "contributors": int(contributors),
    }


_cache: SingleFlightCache[dict[str, int]] = SingleFlightCache(lambda: settings().registry_stats_ttl, maxsize=4)


async def registry_stats() -> dict[str, Any]:
    """`{repositories, unscanned, open_findings, verified_findings, contributors}` over listed repositories.

    Cached (TTL `REGISTRY_STATS_TTL`, default 30 s) with a single-flight refresh; a copy is returned so callers
    cannot alter the cached value."""
    # looked up at call time (not bound at import) so the query function can be wrapped
    return dict(await _cache.get("registry_stats", lambda: query_registry_stats()))


def invalidate_registry_stats() -> None:
    """Forget the cached stats of this process at once: the next caller waits for the recount. Called after the
    commit of a moderation action (visibility, listing, account, deletion)."""
    _cache.invalidate()


_last_throttled_drop: float | None = None


def invalidate_registry_stats_throttled() -> None:
    """Age the cached stats out at most once per TTL (per process), and recount them behind the next caller. For
    changes that come in streams (repository registrations, reports, checks): a recount scans every listed
    repository (0.64 s at 10^6, docs/benchmarks.md "Sitemap at Tier C"), so recounting after each of them would
    keep a core busy and make a home page wait after every report. The values they add show within one TTL and
    one recount (docs/security.md); moderation still drops the stats at once (`invalidate_registry_stats`)."""
    global _last_throttled_drop
    now = time.monotonic()
    if _last_throttled_drop is not None and now - _last_throttled_drop < settings().registry_stats_ttl:
        return
    _last_throttled_drop = now
    _cache.expire()


def reset_registry_stats_cache() -> None:
    """Forget even the value served while a refresh runs. For test isolation (truncated tables), not production."""
    global _last_throttled_drop
    _last_throttled_drop = None
    _cache.reset()
