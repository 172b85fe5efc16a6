"""Passes over every key: the nightly reconcile and the set-based backfill and window recompute (docs/domain.md §5.5,
§13 "Reconcile" and "Backfill")."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import TextClause, bindparam, select, text

from app.infestations.dirty_queue import drain
from app.infestations.keys import Keys
from app.infestations.models import InfestationPattern
from app.infestations.projection import key_ranges, project_range, recompute_range, refresh_pattern
from app.kernel import db
from app.kernel.metrics import RECONCILE_KEYS
from app.kernel.sql import ONE, compiled
from app.ops import leases
from app.ops.leases import new_worker_id
from app.record import outbox
from app.record.public import public_canonical
from app.registry.models import Repository
from app.reports.models import CanonicalFinding

Progress = Callable[[str], Any]

RECONCILE_BATCH = 500
# rows (canonicals for the backfill, instance rows for the window recompute) per key range: one range's statements
# stay well inside memory, and ranges are few (10 at Tier B, 100 at Tier C)
RANGE_ROWS = 100_000
# The hourly window recompute's ranges are smaller: each holds its buckets' locks for its whole transaction, and the
# drain's refreshes of keys in those buckets wait for it (docs/domain.md §5.4)
WINDOW_RANGE_ROWS = 5_000

_canonicals, _repositories = CanonicalFinding.__table__.alias("c"), Repository.__table__.alias("r")
_patterns = InfestationPattern.__table__.alias("p")
_PUBLIC_CANONICALS = _canonicals.join(_repositories, _repositories.c.id == _canonicals.c.repository_id)

# Distinct keys of the public join set, keyset-paged (chained cursor: key > :after).
_SOURCE_KEYS_PAGE = compiled(
    select(_canonicals.c.pattern_key)
    .distinct()
    .select_from(_PUBLIC_CANONICALS)
    .where(
        _canonicals.c.pattern_key > bindparam("after"),
        _canonicals.c.pattern_key != "",
        public_canonical(_repositories, _canonicals.c.id),
    )
    .order_by(_canonicals.c.pattern_key)
    .limit(bindparam("limit"))
)

# Projected keys flagged when nothing in the public join set backs them any more.
_BACKED = (
    select(ONE)
    .select_from(_PUBLIC_CANONICALS)
    .where(_canonicals.c.pattern_key == _patterns.c.pattern_key, public_canonical(_repositories, _canonicals.c.id))
    .exists()
)
_ORPHANS_PAGE = compiled(
    select(_patterns.c.pattern_key, (~_BACKED).label("orphan"))
    .where(_patterns.c.pattern_key > bindparam("after"))
    .order_by(_patterns.c.pattern_key)
    .limit(bindparam("limit"))
)


async def _page(statement: TextClause, after: str, limit: int) -> list[str]:
    async with db.read_session(replica=False) as session:
        return [r[0] for r in (await session.execute(statement, {"after": after, "limit": limit})).all()]


async def reconcile(*, progress: Progress | None = None, record: bool = True) -> dict[str, int]:
    """Heal missed hooks (nightly). Phase "source": every key of the public join set is marked dirty (reason
    "reconcile") and drained; phase "orphans": every projected key without source rows is refreshed, which deletes
    it (hard repository deletes leave such rows behind). `record=False` when the caller (the singleton job) records the run in `job_runs` itself."""
    started_at = datetime.now(UTC)
    me = new_worker_id()
    source_keys = refreshed = 0
    cursor = ""
    while keys := await _page(_SOURCE_KEYS_PAGE, cursor, RECONCILE_BATCH):
        cursor = keys[-1]
        async with db.transaction() as session:
            await outbox.mark_dirty(session, keys, "reconcile", ring=False)
        while True:
            batch = await drain(throttle=False, worker_id=me)
            refreshed += batch.refreshed
            if batch.refreshed == 0 or batch.remaining_claimable == 0:
                break
        source_keys += len(keys)
        RECONCILE_KEYS.labels(phase="source").inc(len(keys))
        if progress:
            progress(f"reconcile source: {source_keys} keys marked, {refreshed} refreshed (at {cursor[:12]})")

    orphan_checked = orphans_removed = 0
    cursor = ""
    while True:
        async with db.read_session(replica=False) as session:
            page = (await session.execute(_ORPHANS_PAGE, {"after": cursor, "limit": RECONCILE_BATCH})).all()
        if not page:
            break
        cursor = page[-1].pattern_key
        for row in page:
            # refresh_pattern recomputes from source, so a key that gained rows since the check is kept
            if row.orphan and await refresh_pattern(row.pattern_key, reason="reconcile") == 0:
                orphans_removed += 1
        orphan_checked += len(page)
        RECONCILE_KEYS.labels(phase="orphans").inc(len(page))
        if progress:
            progress(f"reconcile orphans: {orphan_checked} patterns checked, {orphans_removed} removed")

    summary = {
        "source_keys": source_keys,
        "refreshed": refreshed,
        "orphans_checked": orphan_checked,
        "orphans_removed": orphans_removed,
    }
    if record:
        await leases.record_job_run("reconcile", me, started_at=started_at, slot=None, result=summary)
    return summary


async def _range_count(table: str, rows_per_range: int = RANGE_ROWS) -> int:
    """How many key ranges cover `table` at about `rows_per_range` rows each (the planner's row estimate)."""
    async with db.read_session(replica=False) as session:
        rows = (
            await session.execute(
                text("SELECT greatest(reltuples, 0) FROM pg_class WHERE oid = CAST(:t AS regclass)"), {"t": table}
            )
        ).scalar_one()
    return max(1, math.ceil(float(rows) / rows_per_range))


async def _each_range(ranges: list[Keys], concurrency: int, work: Callable[[int, Keys], Awaitable[None]]) -> None:
    """Run `work` over the ranges, `concurrency` at a time (each range its own transaction and connection)."""
    pending = list(enumerate(ranges))

    async def lane() -> None:
        while pending:
            await work(*pending.pop(0))

    await asyncio.gather(*(lane() for _ in range(max(1, concurrency))))


def _span(keys: Keys) -> str:
    return f"[{keys.lo or '-'}, {keys.hi or '-'})"


async def backfill(*, progress: Progress | None = print, concurrency: int = 1, ranges: int | None = None) -> int:
    """Project every key from source, set-based: the key space is cut into ranges of about RANGE_ROWS canonicals
    (`ranges` overrides the count) and each range is projected in one transaction of a few statements
    (`project_range`), `concurrency` ranges at a time. Keys left without public instances lose their projection.
    Returns the pattern rows written (the keys of the public join set)."""
    count = ranges or await _range_count("canonical_findings")
    done = 0
    finished = 0

    async def work(index: int, keys: Keys) -> None:
        nonlocal done, finished
        started = time.perf_counter()
        instances, patterns = await project_range(keys)
        done += patterns
        finished += 1
        if progress:
            progress(
                f"backfill: range {index + 1}/{count} {_span(keys)}: {patterns} keys, {instances} instances "
                f"({time.perf_counter() - started:.1f} s; {finished} ranges done)"
            )

    await _each_range(key_ranges(count), concurrency, work)
    await _analyze_projection()
    if progress:
        progress(f"backfill: done, {done} keys refreshed")
    return done


async def _analyze_projection() -> None:
    """Fresh planner statistics for the tables a backfill just filled, not autovacuum's a minute later: the drain's
    multi-key statements planned on a projection's stale (empty) statistics cost 2-3 times as much a key at 50-100
    keys a batch (docs/benchmarks.md "Profile: the worker (issue 27, third pass)")."""
    async with db.statement_session() as session:
        await session.execute(
            text("ANALYZE infestation_pattern_instances, infestation_pattern_repos, infestation_patterns")
        )


async def recompute_all_windows(*, progress: Progress | None = None, ranges: int | None = None) -> int:
    """Hourly window decay over every pattern row, set-based: `recompute_range` over key ranges of about
    WINDOW_RANGE_ROWS instance rows (at most 256). Returns the pattern rows updated."""
    count = ranges or await _range_count("infestation_pattern_instances", WINDOW_RANGE_ROWS)
    done = 0

    async def work(index: int, keys: Keys) -> None:
        nonlocal done
        done += await recompute_range(keys)
        if progress:
            progress(f"recompute-windows: range {index + 1}/{count} {_span(keys)}, {done} patterns")

    await _each_range(key_ranges(count), 1, work)
    return done
