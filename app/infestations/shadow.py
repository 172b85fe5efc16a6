"""Shadow-compare by hand: the legacy and rollup ranked lists side by side, every difference described (a cutover
gate and `tarakan infestations shadow-compare`; docs/domain.md §5.7)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from app.infestations.legacy import ranked_legacy
from app.infestations.models import WINDOWED_AGGREGATES
from app.infestations.queries import ranked_rollup
from app.infestations.rows import MIN_REPOS_CHOICES, InfestationFilters, window_bucket
from app.infestations.shadow_sampler import crossed_since_recompute
from app.kernel import db
from app.kernel.metrics import SHADOW_MISMATCHES
from app.kernel.sql import WINDOW_DAYS, Window, statement
from app.record.public import public_canonical
from app.reports.models import CANONICAL_STATUSES

log = logging.getLogger(__name__)

COMPARED = WINDOWED_AGGREGATES  # not first_seen_at: window-scoped in legacy, all-time in the rollup (§5.7)


def _short(key: object) -> str:
    return str(key)[:12]


def describe_mismatches(legacy: list[dict[str, Any]], rollup: list[dict[str, Any]]) -> list[str]:
    """Human-readable differences between two ranked lists (pure; used by shadow_compare and its tests)."""
    problems: list[str] = []
    legacy_keys = [item["pattern_key"] for item in legacy]
    rollup_keys = [item["pattern_key"] for item in rollup]
    only_legacy = [k for k in legacy_keys if k not in set(rollup_keys)]
    only_rollup = [k for k in rollup_keys if k not in set(legacy_keys)]
    if only_legacy:
        problems.append("keys only in legacy: " + ", ".join(_short(k) for k in only_legacy))
    if only_rollup:
        problems.append("keys only in rollup: " + ", ".join(_short(k) for k in only_rollup))
    common_legacy = [k for k in legacy_keys if k in set(rollup_keys)]
    common_rollup = [k for k in rollup_keys if k in set(legacy_keys)]
    if common_legacy != common_rollup:
        first = next(i for i, (a, b) in enumerate(zip(common_legacy, common_rollup, strict=True)) if a != b)
        problems.append(
            f"order differs at rank {first + 1}: legacy {_short(common_legacy[first])}, "
            f"rollup {_short(common_rollup[first])}"
        )
    by_key = {item["pattern_key"]: item for item in rollup}
    for item in legacy:
        other = by_key.get(item["pattern_key"])
        if other is None:
            continue
        for field in COMPARED:
            if item[field] != other[field]:
                problems.append(f"{_short(item['pattern_key'])} {field}: legacy {item[field]}, rollup {other[field]}")
    return problems


# per window bucket: the keys of `:keys` with a public instance that crossed the window since the recompute
_LAGGING = {
    w: statement(
        """
SELECT DISTINCT c.pattern_key
FROM canonical_findings c
JOIN repositories r ON r.id = c.repository_id
JOIN infestation_patterns p ON p.pattern_key = c.pattern_key
WHERE c.pattern_key = ANY(CAST(:keys AS text[])) AND {public} AND {crossed}
""",
        public=public_canonical(),
        crossed=crossed_since_recompute(Window(w)),
    )
    for w in WINDOW_DAYS
}


async def _lagging_keys(keys: Iterable[str], days: int) -> set[str]:
    """The keys whose counts in `days`' window bucket lag the clock until the next hourly recompute."""
    keys = sorted(set(keys))
    if not keys:
        return set()
    async with db.read_session() as session:
        return {str(r[0]) for r in await session.execute(_LAGGING[window_bucket(days)], {"keys": keys})}


def _without_lagging(
    legacy: list[dict[str, Any]], rollup: list[dict[str, Any]], lagging: set[str], limit: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Both lists without the lagging keys. A list cut at `limit` then covers only the top of the other keys (a
    lagging key may have pushed one past its end), so both are compared over the ranks both cover."""
    kept = [[item for item in items if item["pattern_key"] not in lagging] for items in (legacy, rollup)]
    cover = min((len(k) for k, items in zip(kept, (legacy, rollup), strict=True) if len(items) >= limit), default=None)
    return kept[0][:cover], kept[1][:cover]


async def shadow_compare(*, days: int, min_repos: int, status: str | None, limit: int = 100) -> list[str]:
    """Run both paths with the same options; each mismatch is counted, logged and returned as one line."""
    options = InfestationFilters.of(days=days, min_repos=min_repos, status=status, limit=limit)
    legacy = await ranked_legacy(options)
    rollup, _ = await ranked_rollup(options)
    label = f"days={options.days} min_repos={options.min_repos} status={options.status}"
    lagging = await _lagging_keys((item["pattern_key"] for item in [*legacy, *rollup]), options.days)
    if lagging:
        legacy, rollup = _without_lagging(legacy, rollup, lagging, options.limit)
        log.info("shadow-compare %s: %d key(s) skipped, window crossed since the last recompute", label, len(lagging))
    problems = [f"{label}: {problem}" for problem in describe_mismatches(legacy, rollup)]
    if problems:
        SHADOW_MISMATCHES.inc(len(problems))
        for problem in problems:
            log.warning("infestation shadow mismatch %s", problem)
    return problems


async def shadow_compare_all(*, limit: int = 100) -> list[str]:
    """Every window x status x min_repos combination (80 comparisons); empty when the paths agree."""
    problems: list[str] = []
    for days in WINDOW_DAYS:
        for status in (None, *CANONICAL_STATUSES):
            for min_repos in MIN_REPOS_CHOICES:
                problems += await shadow_compare(days=days, min_repos=min_repos, status=status, limit=limit)
    return problems
