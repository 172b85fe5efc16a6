"""Shadow-compare: run the legacy online aggregate and the rollup read side by side and describe every difference.

A cutover gate (docs/domain.md §13 "Cutover gates") and an operator command. Compared: the ranked keys and their order, all
counts, and last_seen_at. Not first_seen_at: the legacy one is window-scoped while the rollup list carries the
all-time one (docs/domain.md §5.7), so they differ by design. Not title/sample either: both come from the public join
but the legacy list recomputes them live, and only the ranking semantics are frozen (docs/domain.md §5.7).

This is the whole-list comparison run by hand (`tarakan infestations shadow-compare`, the cutover gate), in CLI
processes nobody scrapes. What the alert watches is the worker's continuous, sampled comparison per key
(`app.infestations.shadow_sampler`), which counts a mismatch only when it survives the key's refresh.
"""

from __future__ import annotations

import logging
from typing import Any

from app.infestations.legacy import list_infestations_legacy
from app.infestations.models import WINDOWED_AGGREGATES, WINDOWS
from app.infestations.queries import list_infestations_rollup
from app.kernel.metrics import SHADOW_MISMATCHES

log = logging.getLogger(__name__)

COMPARED = WINDOWED_AGGREGATES  # not first_seen_at: window-scoped in legacy, all-time in the rollup (§5.7)
SHADOW_WINDOWS = WINDOWS
SHADOW_STATUSES: tuple[str | None, ...] = (None, "open", "verified", "disputed", "fixed")
SHADOW_MIN_REPOS = (2, 3, 5, 10)


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


async def shadow_compare(*, days: int, min_repos: int, status: str | None, limit: int = 100) -> list[str]:
    """Run both paths with the same options; each mismatch is counted, logged and returned as one line."""
    legacy = await list_infestations_legacy(days=days, min_repos=min_repos, status=status, limit=limit)
    rollup = await list_infestations_rollup(days=days, min_repos=min_repos, status=status, limit=limit)
    label = f"days={days} min_repos={min_repos} status={status or 'all'}"
    problems = [f"{label}: {problem}" for problem in describe_mismatches(legacy, rollup)]
    if problems:
        SHADOW_MISMATCHES.inc(len(problems))
        for problem in problems:
            log.warning("infestation shadow mismatch %s", problem)
    return problems


async def shadow_compare_all(*, limit: int = 100) -> list[str]:
    """Every window x status x min_repos combination (80 comparisons); empty when the paths agree."""
    problems: list[str] = []
    for days in SHADOW_WINDOWS:
        for status in SHADOW_STATUSES:
            for min_repos in SHADOW_MIN_REPOS:
                problems += await shadow_compare(days=days, min_repos=min_repos, status=status, limit=limit)
    return problems
