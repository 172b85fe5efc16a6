"""Continuous shadow-compare in the worker: sampled keys, the legacy aggregate against the rollup rows, lag skipped,
a difference counted only when it survives the key's refresh (docs/operations.md "TarakanShadowMismatch")."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, and_, column, distinct, false, func, text
from sqlalchemy import table as _table
from sqlalchemy.sql.functions import FunctionElement

from app.infestations.models import ALL_TIME, WINDOWED_AGGREGATES
from app.kernel import db
from app.kernel.metrics import SHADOW_COMPARED, SHADOW_MISMATCHES, SHADOW_SKIPPED, SHADOW_SUSPECTS
from app.kernel.sql import WINDOW_DAYS, Window, join, statement
from app.record import outbox
from app.record.public import public_canonical
from app.reports.models import CANONICAL_STATUSES

log = logging.getLogger(__name__)

REASON = "shadow_compare"  # the dirty-key reason of a mismatched key (also the refresh histogram's label)
ALL = "all"

# what is compared, per (window, status): the unfiltered row carries every count and last_seen_at per window (and
# first_seen_at all-time); a status-window row carries repositories, instances and last_seen_at (docs/domain.md §1.8)
_UNFILTERED = WINDOWED_AGGREGATES
_FILTERED = ("repo_count", "instance_count", "last_seen_at")
_STATUS_COUNT = {f"{s}_count": s for s in CANONICAL_STATUSES}


def _column(aggregate: str, window: int | None, status: str | None) -> str:
    return f"{aggregate}__{window or ALL}__{status or ALL}"


def _combinations() -> list[tuple[int | None, str | None, tuple[str, ...]]]:
    combos: list[tuple[int | None, str | None, tuple[str, ...]]] = [(None, None, (*_UNFILTERED, "first_seen_at"))]
    combos += [(None, s, _FILTERED) for s in CANONICAL_STATUSES]
    for w in WINDOW_DAYS:
        combos.append((w, None, _UNFILTERED))
        combos += [(w, s, _FILTERED) for s in CANONICAL_STATUSES]
    return combos


# (all-time + 4 windows) x (unfiltered + 4 statuses) = 25 comparisons per key; `None` is all-time (`window_days` 0)
COMBINATIONS = _combinations()


# the comparison statement's public canonicals `c` and their pattern row `p`
_canonicals = _table(
    "src", column("repository_id"), column("status"), column("inserted_at"), column("updated_at")
).alias("c")
_patterns = _table("infestation_patterns", column("refreshed_at")).alias("p")


def _aggregates() -> list[ColumnElement[Any]]:
    """One column per compared (aggregate, window, status) over the public canonicals: the legacy read."""
    parts: list[ColumnElement[Any]] = []
    for window, status, aggregates in COMBINATIONS:
        where = [_canonicals.c.updated_at >= Window(window).since] if window else []
        if status:
            where.append(_canonicals.c.status == status)
        for aggregate in aggregates:
            cond = list(where)
            if aggregate in _STATUS_COUNT:
                cond.append(_canonicals.c.status == _STATUS_COUNT[aggregate])
            expression: FunctionElement[Any] = {
                "repo_count": func.count(distinct(_canonicals.c.repository_id)),
                "last_seen_at": func.max(_canonicals.c.updated_at),
                "first_seen_at": func.min(_canonicals.c.inserted_at),
            }.get(aggregate, func.count())
            counted = expression.filter(*cond) if cond else expression
            parts.append(counted.label(_column(aggregate, window, status)))
    return parts


def crossed_since_recompute(window: Window) -> ColumnElement[bool]:
    """Whether canonical `c` was inside window W at the last recompute of its key's rollup rows (`p.refreshed_at`:
    the pattern row's window columns and the status windows are recomputed together, docs/domain.md §5.4) and is
    outside now. Until the next hourly recompute that window's counts lag, by design: not a mismatch."""
    return and_(
        _canonicals.c.updated_at >= _patterns.c.refreshed_at - window.length, _canonicals.c.updated_at < window.since
    )


_CROSSED = [
    func.coalesce(func.bool_or(crossed_since_recompute(Window(w))), false()).label(f"crossed_{w}") for w in WINDOW_DAYS
]

_COMPARE = statement(
    """
WITH k AS (SELECT DISTINCT unnest(CAST(:keys AS text[])) AS pattern_key),
src AS (
  SELECT c.pattern_key, c.id, c.repository_id, c.status, c.inserted_at, c.updated_at
  FROM canonical_findings c JOIN repositories r ON r.id = c.repository_id
  WHERE c.pattern_key = ANY(CAST(:keys AS text[])) AND {public}
),
legacy AS (
  SELECT c.pattern_key, {aggregates},
    {crossed}
  FROM src c LEFT JOIN infestation_patterns p ON p.pattern_key = c.pattern_key
  GROUP BY c.pattern_key
),
changed AS (
  SELECT c.pattern_key, max(c.updated_at) AS source_updated_at
  FROM canonical_findings c WHERE c.pattern_key = ANY(CAST(:keys AS text[]))
  GROUP BY c.pattern_key
)
SELECT k.pattern_key,
  EXISTS (SELECT 1 FROM infestation_dirty_keys d WHERE d.pattern_key = k.pattern_key) AS dirty,
  p.pattern_key IS NOT NULL AND changed.source_updated_at > p.updated_at AS changed,
  to_jsonb(legacy) AS legacy, to_jsonb(p) AS rollup,
  (SELECT jsonb_agg(to_jsonb(sw)) FROM infestation_pattern_status_windows sw
   WHERE sw.pattern_key = k.pattern_key) AS status_windows
FROM k
LEFT JOIN infestation_patterns p ON p.pattern_key = k.pattern_key
LEFT JOIN legacy ON legacy.pattern_key = k.pattern_key
LEFT JOIN changed ON changed.pattern_key = k.pattern_key
""",
    public=public_canonical(),
    aggregates=join(",\n    ", _aggregates()),
    crossed=join(",\n    ", _CROSSED),
)

# One index probe per random point (pattern keys are sha256 hex, so the key after a random point is a near-uniform
# pick); past the last key a probe wraps to the first. Half the probes go to the rollup's keys, half to the source's:
# a public key missing from the rollup can only be found from the source side.
_SAMPLE_SQL = """
SELECT DISTINCT k FROM (
  SELECT coalesce(
    (SELECT pattern_key FROM infestation_patterns WHERE pattern_key >= probe ORDER BY pattern_key LIMIT 1),
    (SELECT pattern_key FROM infestation_patterns ORDER BY pattern_key LIMIT 1)) AS k
  FROM unnest(CAST(:rollup_probes AS text[])) AS probe
  UNION ALL
  SELECT coalesce(
    (SELECT pattern_key FROM canonical_findings
     WHERE pattern_key >= probe AND pattern_key IS NOT NULL AND pattern_key <> '' ORDER BY pattern_key LIMIT 1),
    (SELECT pattern_key FROM canonical_findings
     WHERE pattern_key IS NOT NULL AND pattern_key <> '' ORDER BY pattern_key LIMIT 1)) AS k
  FROM unnest(CAST(:source_probes AS text[])) AS probe
) sampled WHERE k IS NOT NULL
"""

_STILL_DIRTY = "SELECT pattern_key FROM infestation_dirty_keys WHERE pattern_key = ANY(CAST(:keys AS text[]))"


@dataclass
class KeyComparison:
    pattern_key: str
    skipped: str | None = None  # "dirty" or "changed": lag, not compared
    skipped_windows: list[int] = field(default_factory=list)  # boundary crossed since the last recompute (all statuses)
    problems: list[str] = field(default_factory=list)


@dataclass
class ShadowRun:
    """One continuous shadow-compare run (its summary is recorded in `job_runs` as "shadow_compare")."""

    sampled: int = 0
    compared: int = 0
    skipped_dirty: int = 0
    skipped_changed: int = 0
    skipped_windows: int = 0
    suspects: list[str] = field(default_factory=list)  # mismatched, marked dirty for their refresh
    fixed: list[str] = field(default_factory=list)  # matched after their refresh: lag or a corrupted row, healed
    undecided: list[str] = field(default_factory=list)  # not refreshed within the wait, or changed meanwhile
    survived: dict[str, list[str]] = field(default_factory=dict)  # still different after the refresh: counted
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "sampled": self.sampled,
            "compared": self.compared,
            "skipped_dirty": self.skipped_dirty,
            "skipped_changed": self.skipped_changed,
            "skipped_windows": self.skipped_windows,
            "suspects": len(self.suspects),
            "fixed": len(self.fixed),
            "undecided": len(self.undecided),
            "mismatches": sorted(self.survived),
            "seconds": round(self.seconds, 3),
        }


def _as_map(raw: Any) -> Mapping[str, Any]:
    if raw is None:
        return {}
    return json.loads(raw) if isinstance(raw, str) else dict(raw)


def _value(source: Mapping[str, Any], column: str, aggregate: str) -> Any:
    value = source.get(column)
    if value is None and aggregate not in ("last_seen_at", "first_seen_at"):
        return 0  # no row on that side: nothing counted
    return value


def _rollup_column(aggregate: str, window: int | None) -> str:
    return f"{aggregate}_{window}d" if window else aggregate


def _status_windows(raw: Any) -> dict[tuple[str, int | None], Mapping[str, Any]]:
    """The key's status-window rows by (status, window); no row: nothing of that status in that window."""
    rows = json.loads(raw) if isinstance(raw, str) else raw or []
    return {(r["status"], None if r["window_days"] == ALL_TIME else r["window_days"]): r for r in rows}


def _judge(row: Mapping[Any, Any]) -> KeyComparison:
    key = str(row["pattern_key"])
    result = KeyComparison(key)
    if row["dirty"]:
        result.skipped = "dirty"
        return result
    if row["changed"]:
        result.skipped = "changed"
        return result
    legacy, rollup = _as_map(row["legacy"]), _as_map(row["rollup"])
    status_windows = _status_windows(row["status_windows"])
    result.skipped_windows = [w for w in WINDOW_DAYS if legacy.get(f"crossed_{w}")]
    for window, status, aggregates in COMBINATIONS:
        if window in result.skipped_windows:
            continue
        for aggregate in aggregates:
            expected = _value(legacy, _column(aggregate, window, status), aggregate)
            if status is None:
                actual = _value(rollup, _rollup_column(aggregate, window), aggregate)
            else:
                actual = _value(status_windows.get((status, window), {}), aggregate, aggregate)
            if expected != actual:
                result.problems.append(
                    f"window={window or ALL} status={status or ALL} {aggregate}: legacy {expected}, rollup {actual}"
                )
    return result


async def compare_keys(keys: list[str]) -> dict[str, KeyComparison]:
    """Compare each key over every window x status in one statement (one snapshot); pure reads, on the primary
    (a replica's lag would pass for a mismatch). In key order, so a run's suspects and log lines are too."""
    if not keys:
        return {}
    async with db.read_session(replica=False) as session:
        rows = (await session.execute(_COMPARE, {"keys": sorted(set(keys))})).mappings().all()
    return {str(row["pattern_key"]): _judge(row) for row in sorted(rows, key=lambda row: str(row["pattern_key"]))}


def _probes(n: int) -> list[str]:
    return [secrets.token_hex(32) for _ in range(n)]


async def sample_keys(size: int) -> list[str]:
    """At most `size` distinct keys drawn at random from the rollup's and the source's keys (2 x size/2 index
    probes, whatever the registry's size)."""
    if size <= 0:
        return []
    from_rollup = (size + 1) // 2
    params = {"rollup_probes": _probes(from_rollup), "source_probes": _probes(size - from_rollup)}
    async with db.read_session(replica=False) as session:
        return sorted(str(r[0]) for r in (await session.execute(text(_SAMPLE_SQL), params)).all())


async def _wait_for_refresh(keys: list[str], wait_seconds: float, poll_seconds: float) -> list[str]:
    """The keys whose dirty row is gone within `wait_seconds`: a drain refreshed them after we marked them (a dirty
    row is deleted only after a refresh of its current version, app.infestations.dirty_queue)."""
    deadline = time.monotonic() + wait_seconds
    pending = set(keys)
    while True:
        async with db.read_session(replica=False) as session:
            pending = {str(r[0]) for r in (await session.execute(text(_STILL_DIRTY), {"keys": sorted(pending)}))}
        if not pending or time.monotonic() >= deadline:
            return sorted(set(keys) - pending)
        await asyncio.sleep(min(poll_seconds, max(0.0, deadline - time.monotonic())))


async def run_once(
    *,
    sample_size: int,
    recheck_seconds: float,
    keys: list[str] | None = None,
    poll_seconds: float = 1.0,
) -> ShadowRun:
    """Sample (or take `keys`), compare, mark mismatched keys dirty, wait for their refresh, compare them again, and
    count and log the ones that still differ."""
    started = time.perf_counter()
    run = ShadowRun()
    chosen = keys if keys is not None else await sample_keys(sample_size)
    run.sampled = len(set(chosen))
    first = await compare_keys(chosen)
    for comparison in first.values():
        if comparison.skipped == "dirty":
            run.skipped_dirty += 1
        elif comparison.skipped == "changed":
            run.skipped_changed += 1
        else:
            run.compared += 1
            run.skipped_windows += len(comparison.skipped_windows)
            if comparison.problems:
                run.suspects.append(comparison.pattern_key)
    SHADOW_COMPARED.inc(run.compared)
    for reason, count in (("dirty", run.skipped_dirty), ("changed", run.skipped_changed)):
        SHADOW_SKIPPED.labels(reason=reason).inc(count)
    SHADOW_SKIPPED.labels(reason="window").inc(run.skipped_windows)
    if run.suspects:
        SHADOW_SUSPECTS.inc(len(run.suspects))
        async with db.transaction() as session:
            await outbox.mark_dirty(session, run.suspects, REASON)
        for key in run.suspects:
            log.info("shadow-compare: %s differs (%s); marked dirty, compared again after its refresh",
                     key, "; ".join(first[key].problems[:3]))  # fmt: skip
        refreshed = await _wait_for_refresh(run.suspects, recheck_seconds, poll_seconds)
        run.undecided = sorted(set(run.suspects) - set(refreshed))
        for key, comparison in (await compare_keys(refreshed)).items():
            if comparison.skipped:
                run.undecided.append(key)
            elif comparison.problems:
                run.survived[key] = comparison.problems
            else:
                run.fixed.append(key)
        for key in run.survived:
            SHADOW_MISMATCHES.inc()
            for problem in run.survived[key]:
                log.warning("infestation shadow mismatch after refresh: pattern_key=%s %s", key, problem)
        if run.undecided:
            log.info("shadow-compare: %d key(s) not refreshed within %.0fs or changed again; not counted",
                     len(run.undecided), recheck_seconds)  # fmt: skip
    run.seconds = time.perf_counter() - started
    return run
