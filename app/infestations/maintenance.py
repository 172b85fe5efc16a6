"""Maintenance passes over every key (docs/domain.md §13 "Reconcile", "Backfill"; docs/domain.md §5.4, §5.5): the nightly
reconcile that heals missed hooks and removes orphans, the first backfill, and the hourly window recompute.
Each walks its keys with a chained keyset cursor (`key > :after`), a batch at a time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text

from app.infestations.dirty_queue import drain
from app.infestations.projection import recompute_windows, refresh_pattern
from app.kernel import db, outbox
from app.kernel.metrics import RECONCILE_KEYS
from app.kernel.public import PUBLIC_CANONICAL
from app.ops import leases
from app.ops.leases import new_worker_id

Progress = Callable[[str], Any]

RECONCILE_BATCH = 500
BACKFILL_BATCH = 200
WINDOWS_BATCH = 200

# Distinct keys of the public join set, keyset-paged (chained cursor: key > :after).
_SOURCE_KEYS_PAGE = f"""
SELECT DISTINCT c.pattern_key FROM canonical_findings c
JOIN repositories r ON r.id = c.repository_id
WHERE c.pattern_key > :after AND c.pattern_key <> '' AND {PUBLIC_CANONICAL}
ORDER BY c.pattern_key LIMIT :limit
"""

_PATTERN_KEYS_PAGE = """
SELECT pattern_key FROM infestation_patterns WHERE pattern_key > :after ORDER BY pattern_key LIMIT :limit
"""

# Projected keys flagged when nothing in the public join set backs them any more.
_ORPHANS_PAGE = f"""
SELECT p.pattern_key, NOT EXISTS (
  SELECT 1 FROM canonical_findings c JOIN repositories r ON r.id = c.repository_id
  WHERE c.pattern_key = p.pattern_key AND {PUBLIC_CANONICAL}
) AS orphan
FROM infestation_patterns p WHERE p.pattern_key > :after ORDER BY p.pattern_key LIMIT :limit
"""


async def _page(sql: str, after: str, limit: int) -> list[str]:
    async with db.read_session(replica=False) as session:
        return [r[0] for r in (await session.execute(text(sql), {"after": after, "limit": limit})).all()]


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
            page = (await session.execute(text(_ORPHANS_PAGE), {"after": cursor, "limit": RECONCILE_BATCH})).all()
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


async def backfill(*, progress: Progress | None = print, concurrency: int = 1) -> int:
    """Project every key of the public join set inline (batch 200, chained cursor). Returns keys refreshed.

    `concurrency` refreshes that many keys at once (one connection each): keys are independent, and a first
    backfill of a large registry is bound by round trips, not by any one key."""
    done = 0
    cursor = ""
    while keys := await _page(_SOURCE_KEYS_PAGE, cursor, BACKFILL_BATCH):
        cursor = keys[-1]
        lanes = [keys[i :: max(1, concurrency)] for i in range(max(1, concurrency))]

        async def run(lane: list[str]) -> None:
            for key in lane:
                await refresh_pattern(key, reason="backfill")

        await asyncio.gather(*(run(lane) for lane in lanes if lane))
        before, done = done, done + len(keys)
        if progress and done // 1000 > before // 1000:
            progress(f"backfill: {done} keys refreshed (at {keys[-1][:12]})")
    if progress:
        progress(f"backfill: done, {done} keys refreshed")
    return done


async def recompute_all_windows(*, progress: Progress | None = None) -> int:
    """Hourly window decay over every pattern row (cursor, batch 200). Returns patterns visited."""
    done = 0
    cursor = ""
    while keys := await _page(_PATTERN_KEYS_PAGE, cursor, WINDOWS_BATCH):
        cursor = keys[-1]
        for key in keys:
            await recompute_windows(key)
        done += len(keys)
        if progress:
            progress(f"recompute-windows: {done} patterns")
    return done
