"""Projection of the public join set into the rollup tables (design "Recompute algorithm", domain §5.2-§5.6).

Everything runs in SQL (INSERT ... SELECT): a hot key has 10^4+ canonicals and none of them is loaded into Python.

Pending work lives in `infestation_dirty_keys` (product decision 1). `drain()` claims keys with
`FOR UPDATE SKIP LOCKED` in a short transaction, refreshes each key in its own transaction, then deletes the dirty
row only if its `version` is still the one it claimed; a key re-dirtied during its refresh is released and refreshed
again. Deviation from the design's "200 inline + EnqueueRepoPatterns continuation jobs": a repository fan-out
writes all its keys to the dirty table in one statement (`hooks.mark_repository_dirty`), and each drain job
refreshes at most 200 keys, then enqueues a continuation job while work remains (`jobs/worker.py`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.infestations import hooks
from app.infestations.models import WINDOWED_AGGREGATES, WINDOWS
from app.kernel import db
from app.kernel.config import settings
from app.kernel.metrics import (
    DIRTY_BACKLOG,
    DIRTY_OLDEST_AGE,
    RECONCILE_KEYS,
    REFRESH_DURATION,
    REFRESH_ERRORS,
    REFRESH_INSTANCES,
)
from app.ops import leases
from app.ops.leases import new_worker_id

log = logging.getLogger(__name__)

Progress = Callable[[str], Any]

MAX_BACKOFF_SECONDS = 300
RECONCILE_BATCH = 500
BACKFILL_BATCH = 200
WINDOWS_BATCH = 200

# Status rank of the representative instance: open-preferring, then newest (domain §4.2).
_STATUS_RANK = "CASE status WHEN 'open' THEN 0 WHEN 'disputed' THEN 1 WHEN 'verified' THEN 2 ELSE 3 END"
_REPRESENTATIVE_ORDER = f"{_STATUS_RANK}, updated_at DESC, canonical_finding_id DESC"

_LOCK_KEY = "SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"

_INSTANCE_COLUMNS = (
    "pattern_key, repository_id, status, severity, title, file_path, sample_occurrence_public_id, sample_scan_id, "
    "sample_commit_sha, inserted_at, updated_at"
)

# One row per canonical of the public join set (domain §3), carrying its newest PUBLIC occurrence as the sample.
# The key's instance rows are reconciled with it in one statement: rows that really changed are updated (a refresh
# of a hot key under a storm rewrites a handful of its 10^4 rows, not all of them), rows that left the join set are
# deleted, and a canonical whose pattern_key changed has its row moved here from its old key.
_SYNC_INSTANCES = f"""
WITH src AS (
  SELECT DISTINCT ON (c.id)
    c.id AS canonical_finding_id, c.pattern_key, c.repository_id, c.status, c.severity,
    COALESCE(NULLIF(c.title, ''), 'Unknown pattern') AS title, c.file_path,
    f.public_id AS sample_occurrence_public_id, s.id AS sample_scan_id, s.commit_sha AS sample_commit_sha,
    c.inserted_at, c.updated_at
  FROM canonical_findings c
  JOIN repositories r ON r.id = c.repository_id
  JOIN scan_findings f ON f.canonical_finding_id = c.id
  JOIN scans s ON s.id = f.scan_id
  WHERE c.pattern_key = :key AND c.pattern_key <> ''
    AND r.listing_status = 'listed'
    AND s.visibility = 'public'
  ORDER BY c.id, s.inserted_at DESC, f.id DESC
),
upserted AS (
  INSERT INTO infestation_pattern_instances AS i (canonical_finding_id, {_INSTANCE_COLUMNS})
  SELECT canonical_finding_id, {_INSTANCE_COLUMNS} FROM src
  ON CONFLICT (canonical_finding_id) DO UPDATE SET ({_INSTANCE_COLUMNS}) = (
    EXCLUDED.pattern_key, EXCLUDED.repository_id, EXCLUDED.status, EXCLUDED.severity, EXCLUDED.title,
    EXCLUDED.file_path, EXCLUDED.sample_occurrence_public_id, EXCLUDED.sample_scan_id, EXCLUDED.sample_commit_sha,
    EXCLUDED.inserted_at, EXCLUDED.updated_at)
  WHERE (i.{_INSTANCE_COLUMNS.replace(", ", ", i.")}) IS DISTINCT FROM (
    EXCLUDED.pattern_key, EXCLUDED.repository_id, EXCLUDED.status, EXCLUDED.severity, EXCLUDED.title,
    EXCLUDED.file_path, EXCLUDED.sample_occurrence_public_id, EXCLUDED.sample_scan_id, EXCLUDED.sample_commit_sha,
    EXCLUDED.inserted_at, EXCLUDED.updated_at)
  RETURNING 1
),
removed AS (
  DELETE FROM infestation_pattern_instances i
  WHERE i.pattern_key = :key AND NOT EXISTS (SELECT 1 FROM src WHERE src.canonical_finding_id = i.canonical_finding_id)
  RETURNING 1
)
SELECT (SELECT count(*) FROM src) AS instances, (SELECT count(*) FROM upserted) AS written,
       (SELECT count(*) FROM removed) AS removed
"""

_MEMBERSHIP_COLUMNS = (
    "instance_count, open_count, verified_count, fixed_count, disputed_count, primary_status, severity, title, "
    "sample_occurrence_public_id, first_seen_at, last_seen_at"
)
_MEMBERSHIP_EXCLUDED = ", ".join(f"EXCLUDED.{c}" for c in _MEMBERSHIP_COLUMNS.split(", "))

# Memberships from the key's instance rows; unchanged memberships are not rewritten.
_UPSERT_MEMBERSHIPS = f"""
INSERT INTO infestation_pattern_repos AS m (
  pattern_key, repository_id, instance_count, open_count, verified_count, fixed_count, disputed_count,
  primary_status, severity, title, sample_occurrence_public_id, first_seen_at, last_seen_at, inserted_at, updated_at)
SELECT :key, agg.repository_id, agg.instance_count, agg.open_count, agg.verified_count, agg.fixed_count,
  agg.disputed_count,
  CASE WHEN agg.open_count > 0 THEN 'open' WHEN agg.disputed_count > 0 THEN 'disputed'
       WHEN agg.verified_count > 0 THEN 'verified' ELSE 'fixed' END,
  rep.severity, rep.title, rep.sample_occurrence_public_id, agg.first_seen_at, agg.last_seen_at, now(), now()
FROM (
  SELECT repository_id, count(*) AS instance_count,
    count(*) FILTER (WHERE status = 'open') AS open_count,
    count(*) FILTER (WHERE status = 'verified') AS verified_count,
    count(*) FILTER (WHERE status = 'fixed') AS fixed_count,
    count(*) FILTER (WHERE status = 'disputed') AS disputed_count,
    min(inserted_at) AS first_seen_at, max(updated_at) AS last_seen_at
  FROM infestation_pattern_instances WHERE pattern_key = :key GROUP BY repository_id
) agg
JOIN (
  SELECT DISTINCT ON (repository_id) repository_id, severity, title, sample_occurrence_public_id
  FROM infestation_pattern_instances WHERE pattern_key = :key
  ORDER BY repository_id, {_REPRESENTATIVE_ORDER}
) rep USING (repository_id)
ON CONFLICT (pattern_key, repository_id) DO UPDATE SET ({_MEMBERSHIP_COLUMNS}) = ({_MEMBERSHIP_EXCLUDED}),
  updated_at = now()
WHERE (m.{_MEMBERSHIP_COLUMNS.replace(", ", ", m.")}) IS DISTINCT FROM ({_MEMBERSHIP_EXCLUDED})
"""

_DELETE_STALE_MEMBERSHIPS = """
DELETE FROM infestation_pattern_repos e
WHERE e.pattern_key = :key
  AND NOT EXISTS (SELECT 1 FROM infestation_pattern_instances i
                  WHERE i.pattern_key = e.pattern_key AND i.repository_id = e.repository_id)
"""


def _since(window: int) -> str:
    # W x 24 h exactly (not 'W days', which follows DST in a non-UTC session time zone): same `since` as the
    # legacy read (now - days x 24 h).
    return f"now() - interval '{window * 24} hours'"


def _window_columns() -> list[str]:
    return [f"{name}_{w}d" for w in WINDOWS for name in WINDOWED_AGGREGATES]


def _window_aggregates() -> str:
    parts: list[str] = []
    for w in WINDOWS:
        inside = f"updated_at >= {_since(w)}"
        parts += [
            f"count(DISTINCT repository_id) FILTER (WHERE {inside}) AS repo_count_{w}d",
            f"count(*) FILTER (WHERE {inside}) AS instance_count_{w}d",
            *(
                f"count(*) FILTER (WHERE {inside} AND status = '{s}') AS {s}_count_{w}d"
                for s in ("open", "verified", "fixed", "disputed")
            ),
            f"max(updated_at) FILTER (WHERE {inside}) AS last_seen_at_{w}d",
        ]
    return ",\n    ".join(parts)


_ALL_TIME_COLUMNS = [
    "repo_count",
    "instance_count",
    "open_count",
    "verified_count",
    "fixed_count",
    "disputed_count",
    "first_seen_at",
    "last_seen_at",
]
_REPRESENTATIVE_COLUMNS = ["title", "severity", "sample_file_path", "sample_occurrence_public_id"]
_PATTERN_COLUMNS = [*_REPRESENTATIVE_COLUMNS, *_ALL_TIME_COLUMNS, *_window_columns(), "refreshed_at"]

_UPSERT_PATTERN = f"""
INSERT INTO infestation_patterns AS p (pattern_key, {", ".join(_PATTERN_COLUMNS)}, inserted_at, updated_at)
SELECT :key, rep.title, rep.severity, rep.file_path, rep.sample_occurrence_public_id,
  agg.*, now(), now(), now()
FROM (
  SELECT count(DISTINCT repository_id) AS repo_count, count(*) AS instance_count,
    count(*) FILTER (WHERE status = 'open') AS open_count,
    count(*) FILTER (WHERE status = 'verified') AS verified_count,
    count(*) FILTER (WHERE status = 'fixed') AS fixed_count,
    count(*) FILTER (WHERE status = 'disputed') AS disputed_count,
    min(inserted_at) AS first_seen_at, max(updated_at) AS last_seen_at,
    {_window_aggregates()}
  FROM infestation_pattern_instances WHERE pattern_key = :key
) agg
CROSS JOIN (
  SELECT title, severity, file_path, sample_occurrence_public_id
  FROM infestation_pattern_instances WHERE pattern_key = :key
  ORDER BY {_REPRESENTATIVE_ORDER} LIMIT 1
) rep
ON CONFLICT (pattern_key) DO UPDATE SET
  {", ".join(f"{c} = EXCLUDED.{c}" for c in _PATTERN_COLUMNS)}, updated_at = now()
"""

_UPDATE_WINDOWS = f"""
UPDATE infestation_patterns p SET
  {", ".join(f"{c} = w.{c}" for c in _window_columns())}, refreshed_at = now(), updated_at = now()
FROM (
  SELECT {_window_aggregates()}
  FROM infestation_pattern_instances WHERE pattern_key = :key
  HAVING count(*) > 0
) w
WHERE p.pattern_key = :key
"""

_DELETE_PROJECTION = [
    "DELETE FROM infestation_pattern_instances WHERE pattern_key = :key",
    "DELETE FROM infestation_pattern_repos WHERE pattern_key = :key",
    "DELETE FROM infestation_patterns WHERE pattern_key = :key",
]

# Distinct keys of the public join set, keyset-paged (chained cursor: key > :after).
_SOURCE_KEYS_PAGE = """
SELECT DISTINCT c.pattern_key FROM canonical_findings c
JOIN repositories r ON r.id = c.repository_id
WHERE c.pattern_key > :after AND c.pattern_key <> '' AND r.listing_status = 'listed'
  AND EXISTS (SELECT 1 FROM scan_findings f JOIN scans s ON s.id = f.scan_id
              WHERE f.canonical_finding_id = c.id AND s.visibility = 'public')
ORDER BY c.pattern_key LIMIT :limit
"""

_PATTERN_KEYS_PAGE = """
SELECT pattern_key FROM infestation_patterns WHERE pattern_key > :after ORDER BY pattern_key LIMIT :limit
"""

# Projected keys flagged when nothing in the public join set backs them any more.
_ORPHANS_PAGE = """
SELECT p.pattern_key, NOT EXISTS (
  SELECT 1 FROM canonical_findings c JOIN repositories r ON r.id = c.repository_id
  WHERE c.pattern_key = p.pattern_key AND r.listing_status = 'listed'
    AND EXISTS (SELECT 1 FROM scan_findings f JOIN scans s ON s.id = f.scan_id
                WHERE f.canonical_finding_id = c.id AND s.visibility = 'public')
) AS orphan
FROM infestation_patterns p WHERE p.pattern_key > :after ORDER BY p.pattern_key LIMIT :limit
"""


async def _delete_projection(session: AsyncSession, key: str) -> None:
    for statement in _DELETE_PROJECTION:
        await session.execute(text(statement), {"key": key})


async def refresh_pattern(pattern_key: str, *, reason: str = "manual") -> int:
    """Recompute one key's instances, memberships and pattern row from source, in one transaction.

    Returns the number of instances the key now has (its public join set); 0 means the key left the public join
    set and its projection was hard-deleted (its show page then 404s). Serialized per key by a transaction-scoped
    advisory lock. Only rows that really changed are written."""
    started = time.perf_counter()
    try:
        async with db.transaction() as session:
            await session.execute(text(_LOCK_KEY), {"key": pattern_key})
            synced = (await session.execute(text(_SYNC_INSTANCES), {"key": pattern_key})).mappings().one()
            instances = int(synced["instances"])
            if instances == 0:
                await _delete_projection(session, pattern_key)
            else:
                await session.execute(text(_UPSERT_MEMBERSHIPS), {"key": pattern_key})
                await session.execute(text(_DELETE_STALE_MEMBERSHIPS), {"key": pattern_key})
                await session.execute(text(_UPSERT_PATTERN), {"key": pattern_key})
    except Exception:
        REFRESH_ERRORS.inc()
        raise
    REFRESH_DURATION.labels(reason=reason).observe(time.perf_counter() - started)
    REFRESH_INSTANCES.labels(reason=reason).observe(instances)
    return instances


async def recompute_windows(pattern_key: str) -> None:
    """Hourly window decay for one key from the instance table only (no source join, domain §5.4).

    No instances left (e.g. a hard repository delete cascaded them away) -> the key's projection is deleted;
    instances without a pattern row -> a full `refresh_pattern`."""
    async with db.transaction() as session:
        await session.execute(text(_LOCK_KEY), {"key": pattern_key})
        updated = await session.execute(text(_UPDATE_WINDOWS), {"key": pattern_key})
        if int(updated.rowcount or 0) == 1:  # type: ignore[attr-defined]
            return
        has_instances = (
            await session.execute(
                text("SELECT EXISTS (SELECT 1 FROM infestation_pattern_instances WHERE pattern_key = :key)"),
                {"key": pattern_key},
            )
        ).scalar_one()
        if not has_instances:
            await _delete_projection(session, pattern_key)
            return
    await refresh_pattern(pattern_key, reason="window_decay")


# ---------------------------------------------------------------------------------------------------------------
# The dirty-keys protocol


@dataclass(frozen=True)
class ClaimedKey:
    pattern_key: str
    version: int
    attempts: int
    reason: str


@dataclass
class DrainResult:
    """One drain batch. `remaining_claimable` > 0 calls for a continuation job; otherwise, when keys are only
    waiting for their throttle/backoff, `next_available_in_seconds` says when the next one becomes claimable."""

    refreshed: int = 0
    failed: int = 0
    released: int = 0
    remaining_claimable: int = 0
    next_available_in_seconds: float | None = None
    refreshed_keys: list[str] = field(default_factory=list)


_CLAIM = """
UPDATE infestation_dirty_keys d
SET claimed_by = :me, claimed_until = now() + make_interval(secs => :claim_seconds), attempts = d.attempts + 1
WHERE d.pattern_key IN (
  SELECT pattern_key FROM infestation_dirty_keys
  WHERE available_at <= now() AND (claimed_until IS NULL OR claimed_until < now())
  ORDER BY pattern_key
  FOR UPDATE SKIP LOCKED
  LIMIT :n
)
RETURNING d.pattern_key, d.version, d.attempts, d.reason
"""

# Delete only the version we refreshed (and only while the claim is ours).
_COMPLETE = "DELETE FROM infestation_dirty_keys WHERE pattern_key = :key AND version = :version AND claimed_by = :me"

# Re-dirtied during the refresh: hand it back; under a storm it waits for the hot-key interval.
_RELEASE = """
UPDATE infestation_dirty_keys
SET claimed_by = NULL, claimed_until = NULL, attempts = 0, available_at = now() + make_interval(secs => :delay)
WHERE pattern_key = :key AND claimed_by = :me
"""

_RELEASE_FAILED = f"""
UPDATE infestation_dirty_keys
SET claimed_by = NULL, claimed_until = NULL,
    available_at = now() + make_interval(secs => least(power(2, attempts), {MAX_BACKOFF_SECONDS}))
WHERE pattern_key = :key AND claimed_by = :me
"""

_BACKLOG = """
SELECT count(*) AS backlog,
  count(*) FILTER (WHERE available_at <= now() AND (claimed_until IS NULL OR claimed_until < now())) AS claimable,
  EXTRACT(EPOCH FROM min(GREATEST(available_at, COALESCE(claimed_until, available_at))) FILTER (
    WHERE available_at > now() OR claimed_until >= now()) - now()) AS next_in,
  EXTRACT(EPOCH FROM now() - min(first_dirtied_at)) AS oldest_age
FROM infestation_dirty_keys
"""


async def claim_dirty_keys(worker_id: str, batch_size: int) -> list[ClaimedKey]:
    """Claim up to `batch_size` available keys in a short transaction (SKIP LOCKED: workers never collide)."""
    async with db.transaction() as session:
        rows = (
            await session.execute(
                text(_CLAIM), {"me": worker_id, "n": batch_size, "claim_seconds": settings().claim_seconds}
            )
        ).all()
    return sorted(
        (ClaimedKey(r.pattern_key, int(r.version), int(r.attempts), r.reason) for r in rows),
        key=lambda c: c.pattern_key,
    )


async def settle_refreshed(claim: ClaimedKey, worker_id: str, *, elapsed: float, throttle: bool) -> bool:
    """After a successful refresh: delete the dirty row if its version did not move (True), else release it so the
    key is refreshed again (False), `hot_key_interval` after this refresh started when throttling."""
    async with db.transaction() as session:
        deleted = await session.execute(
            text(_COMPLETE), {"key": claim.pattern_key, "version": claim.version, "me": worker_id}
        )
        if int(deleted.rowcount or 0) == 1:  # type: ignore[attr-defined]
            return True
        delay = max(0.0, settings().hot_key_interval_seconds - elapsed) if throttle else 0.0
        await session.execute(text(_RELEASE), {"key": claim.pattern_key, "me": worker_id, "delay": delay})
    return False


async def settle_failed(claim: ClaimedKey, worker_id: str) -> None:
    """A failed refresh keeps the key, claimable again after min(2^attempts, 300) s."""
    async with db.transaction() as session:
        await session.execute(text(_RELEASE_FAILED), {"key": claim.pattern_key, "me": worker_id})


async def dirty_backlog() -> tuple[int, int, float | None]:
    """(backlog, claimable now, seconds until the next waiting key becomes claimable); also sets the gauges."""
    async with db.read_session(replica=False) as session:
        row = (await session.execute(text(_BACKLOG))).one()
    DIRTY_BACKLOG.set(row.backlog)
    DIRTY_OLDEST_AGE.set(float(row.oldest_age or 0))
    next_in = None if row.next_in is None else max(0.0, float(row.next_in))
    return int(row.backlog), int(row.claimable), next_in


async def drain(*, batch_size: int = 200, throttle: bool = True, worker_id: str | None = None) -> DrainResult:
    """Claim up to `batch_size` dirty keys, refresh each (sorted), delete only what was refreshed."""
    me = worker_id or new_worker_id()
    result = DrainResult()
    claims = await claim_dirty_keys(me, batch_size)
    settled = 0
    try:
        for claim in claims:
            await _drain_one(claim, me, throttle, result)
            settled += 1
    except asyncio.CancelledError:
        # a worker stopping (SIGTERM) hands its unfinished claims back at once instead of after the claim TTL
        await asyncio.shield(_release_claims([c.pattern_key for c in claims[settled:]], me))
        raise
    _, result.remaining_claimable, result.next_available_in_seconds = await dirty_backlog()
    return result


async def _release_claims(keys: list[str], me: str) -> None:
    if keys:
        async with db.transaction() as session:
            await session.execute(
                text(
                    "UPDATE infestation_dirty_keys SET claimed_by = NULL, claimed_until = NULL "
                    "WHERE claimed_by = :me AND pattern_key = ANY(CAST(:keys AS text[]))"
                ),
                {"me": me, "keys": keys},
            )


async def _drain_one(claim: ClaimedKey, me: str, throttle: bool, result: DrainResult) -> None:
    started = time.monotonic()
    try:
        await refresh_pattern(claim.pattern_key, reason=claim.reason)
    except Exception:
        log.exception("refresh of %s failed (attempt %d); retrying with backoff", claim.pattern_key, claim.attempts)
        result.failed += 1
        await settle_failed(claim, me)
        return
    result.refreshed += 1
    result.refreshed_keys.append(claim.pattern_key)
    if not await settle_refreshed(claim, me, elapsed=time.monotonic() - started, throttle=throttle):
        result.released += 1


async def _release_throttled() -> None:
    # Keys only waiting for the hot-key interval (attempts reset to 0) become available now; failed keys keep
    # their backoff so a permanently failing key cannot spin drain_all forever.
    async with db.transaction() as session:
        await session.execute(
            text(
                "UPDATE infestation_dirty_keys SET available_at = now() "
                "WHERE available_at > now() AND attempts = 0 AND claimed_by IS NULL"
            )
        )


async def drain_all(*, worker_id: str | None = None) -> int:
    """Run everything pending and return the number of refreshes (`tarakan jobs drain`, the seed, tests)."""
    me = worker_id or new_worker_id()
    await _release_throttled()
    total = 0
    while True:
        result = await drain(throttle=False, worker_id=me)
        total += result.refreshed
        if result.remaining_claimable == 0:
            return total


# ---------------------------------------------------------------------------------------------------------------
# Reconcile, backfill, window recompute


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
            await hooks.mark_dirty(session, keys, "reconcile")
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
