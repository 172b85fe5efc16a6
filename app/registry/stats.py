"""`registry_stats()`: the registry's headline numbers, cached in-process with a single-flight refresh.

The home page and the sitemap threshold read it on every request; the counts scan every listed repository, so a
miss costs a sequential pass at scale. A `cachetools.TTLCache` (30 s by default, `REGISTRY_STATS_TTL`, 0 disables
it) holds the value; one refresher per key recomputes it while concurrent callers get the value they already had
(stale-while-revalidate). The report and moderation services call `invalidate_registry_stats()` after commit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Generic, TypeVar

from cachetools import TTLCache
from sqlalchemy import text

from app.kernel import db
from app.kernel.config import settings

V = TypeVar("V")


class SingleFlightCache(Generic[V]):
    """A TTL cache for async loaders: one refresher per key (an asyncio.Lock), others get the current value.

    - fresh hit: returned from the `TTLCache` (no await, a dict lookup).
    - expired, a refresh already running, a previous value known: that value is returned at once.
    - expired, nothing known yet: callers wait for the one refresher and share its result (also with TTL 0).
    `invalidate()` drops fresh values and bumps a generation, so a refresh that started before the invalidation
    cannot mark its (possibly pre-change) result fresh.
    """

    def __init__(self, ttl: Callable[[], float], *, maxsize: int = 64) -> None:
        self._ttl = ttl
        self._maxsize = maxsize
        self._fresh: TTLCache[Hashable, V] = TTLCache(maxsize=maxsize, ttl=0)  # sized on first use
        self._last: dict[Hashable, tuple[int, V]] = {}  # key -> (generation, value), kept past expiry
        self._completed: dict[Hashable, int] = {}  # key -> refreshes finished (lets waiters share a result)
        self._locks: dict[tuple[int, Hashable], asyncio.Lock] = {}
        self._generation = 0

    def _fresh_cache(self) -> TTLCache[Hashable, V]:
        ttl = self._ttl()
        if ttl != self._fresh.ttl:  # the configured TTL changed (tests, operators): start over
            self._fresh = TTLCache(maxsize=self._maxsize, ttl=ttl)
        return self._fresh

    def _lock(self, key: Hashable) -> asyncio.Lock:
        # locks belong to an event loop; a CLI may run several loops in one process
        lock_key = (id(asyncio.get_running_loop()), key)
        lock = self._locks.get(lock_key)
        if lock is None:
            lock = self._locks[lock_key] = asyncio.Lock()
        return lock

    async def get(self, key: Hashable, loader: Callable[[], Awaitable[V]]) -> V:
        fresh = self._fresh_cache()
        try:
            return fresh[key]
        except KeyError:
            pass
        lock = self._lock(key)
        last = self._last.get(key)
        if lock.locked() and last is not None:
            return last[1]  # a refresh is running: serve what we have
        seen = self._completed.get(key, 0)
        async with lock:
            try:
                return self._fresh_cache()[key]
            except KeyError:
                pass
            last = self._last.get(key)
            if self._completed.get(key, 0) != seen and last is not None and last[0] == self._generation:
                return last[1]  # the refresher we waited for produced a result after the last invalidation
            generation = self._generation
            value = await loader()
            self._completed[key] = self._completed.get(key, 0) + 1
            self._last[key] = (generation, value)
            if generation == self._generation and self._fresh.ttl > 0:
                self._fresh[key] = value
            return value

    def invalidate(self) -> None:
        self._generation += 1
        self._fresh.clear()

    def reset(self) -> None:
        """Forget everything, the last known values included (test isolation)."""
        self.invalidate()
        self._last.clear()


_STATS_SQL = text(
    """
    SELECT count(*) AS repositories,
           count(*) FILTER (WHERE status = 'unscanned') AS unscanned,
           coalesce(sum(open_findings_count), 0) AS open_findings,
           coalesce(sum(verified_findings_count), 0) AS verified_findings
    FROM repositories WHERE listing_status = 'listed'
    """
)

# Contributors: accounts with a report that anonymous visitors can see (public or public_summary) or a
# confirmation on such a report, on a listed repository. Restricted reports are hidden, so their authors and
# confirmers are not counted (domain §1.2: restricted does not count for the contributor count).
_CONTRIBUTORS_SQL = text(
    """
    SELECT count(*) FROM (
      SELECT s.submitted_by_id AS account_id
      FROM scans s JOIN repositories r ON r.id = s.repository_id
      WHERE r.listing_status = 'listed' AND s.visibility IN ('public', 'public_summary')
      UNION
      SELECT c.account_id
      FROM scan_confirmations c JOIN scans s ON s.id = c.scan_id JOIN repositories r ON r.id = s.repository_id
      WHERE r.listing_status = 'listed' AND s.visibility IN ('public', 'public_summary')
    ) AS contributors
    """
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
    """Forget the cached stats of this process. Call after the commit of anything that changes the registry
    (report submitted, check or confirmation recorded, visibility or listing moderated, repository registered)."""
    _cache.invalidate()


def reset_registry_stats_cache() -> None:
    """Forget even the value served while a refresh runs. For test isolation (truncated tables), not production."""
    _cache.reset()
