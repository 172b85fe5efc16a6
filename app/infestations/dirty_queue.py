"""The dirty-key queue: claim with SKIP LOCKED, refresh, settle by version (docs/domain.md §5.5, §12 decision 1)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from sqlalchemy import literal, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.infestations.projection import lock_keys, lock_order, observe_refresh, refresh_locked_batch, refresh_pattern
from app.kernel import db
from app.kernel.config import settings
from app.kernel.metrics import DIRTY_BACKLOG, DIRTY_OLDEST_AGE, DRAINED_KEYS, HOT_KEYS_THROTTLED
from app.kernel.purge import purge
from app.kernel.shared_cache import ATLAS_TAG, pattern_tag, repository_tag
from app.kernel.sql import statement
from app.ops.leases import new_worker_id, record_job_run

log = logging.getLogger(__name__)

MAX_BACKOFF_SECONDS = 300


@dataclass(frozen=True)
class ClaimedKey:
    pattern_key: str
    version: int
    attempts: int
    reason: str
    repositories: tuple[int, ...] | None = None  # the repositories whose rows changed; None: the whole key


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


# the hot-key cap between refreshes: a key refreshed from source within the interval is deferred, not claimed
# (docs/domain.md §5.5 "Claim"); `drain_all` does not throttle
_CLAIM = """
WITH candidates AS (
  SELECT pattern_key FROM infestation_dirty_keys
  WHERE available_at <= now() AND (claimed_until IS NULL OR claimed_until < now())
  ORDER BY pattern_key
  FOR UPDATE SKIP LOCKED
  LIMIT :n
),
cooling AS (
  UPDATE infestation_dirty_keys d SET available_at = p.updated_at + make_interval(secs => :interval)
  FROM candidates c JOIN infestation_patterns p ON p.pattern_key = c.pattern_key
  WHERE d.pattern_key = c.pattern_key AND :interval > 0
    AND p.updated_at > now() - make_interval(secs => :interval)
  RETURNING d.pattern_key
)
UPDATE infestation_dirty_keys d
SET claimed_by = :me, claimed_until = now() + make_interval(secs => :claim_seconds), attempts = d.attempts + 1
FROM candidates c
WHERE d.pattern_key = c.pattern_key AND c.pattern_key NOT IN (SELECT pattern_key FROM cooling)
RETURNING d.pattern_key, d.version, d.attempts, d.reason, d.repository_ids
"""

# Delete only the version we refreshed (and only while the claim is ours).
_COMPLETE = "DELETE FROM infestation_dirty_keys WHERE pattern_key = :key AND version = :version AND claimed_by = :me"

# Re-dirtied during the refresh: hand it back; under a storm it waits for the hot-key interval.
_RELEASE = """
UPDATE infestation_dirty_keys
SET claimed_by = NULL, claimed_until = NULL, attempts = 0, available_at = now() + make_interval(secs => :delay)
WHERE pattern_key = :key AND claimed_by = :me
"""

# A batch's settle: every key whose version did not move, deleted in one statement (the refresh's transaction)
_COMPLETE_MANY = """
DELETE FROM infestation_dirty_keys d
USING unnest(CAST(:keys AS text[]), CAST(:versions AS bigint[])) AS v(pattern_key, version)
WHERE d.pattern_key = v.pattern_key AND d.version = v.version AND d.claimed_by = :me
RETURNING d.pattern_key
"""

_RELEASE_MANY = """
UPDATE infestation_dirty_keys d
SET claimed_by = NULL, claimed_until = NULL, attempts = 0, available_at = now() + make_interval(secs => v.delay)
FROM unnest(CAST(:keys AS text[]), CAST(:delays AS double precision[])) AS v(pattern_key, delay)
WHERE d.pattern_key = v.pattern_key AND d.claimed_by = :me
"""

# keys refreshed and settled in one transaction, set-based (about 10 statements a batch); measured on Tier A
# (docs/benchmarks.md "Profile: the worker (issue 27, third pass)"): per key cheaper up to ~60, then flat while the
# transaction (the locks it holds) keeps growing; at 150 reports/s a drain holds ~70 keys
REFRESH_BATCH = 60

_RELEASE_FAILED = statement(
    """
UPDATE infestation_dirty_keys
SET claimed_by = NULL, claimed_until = NULL,
    available_at = now() + make_interval(secs => least(power(2, attempts), {max_backoff}))
WHERE pattern_key = :key AND claimed_by = :me
""",
    max_backoff=literal(MAX_BACKOFF_SECONDS),
)

_BACKLOG = """
SELECT count(*) AS backlog,
  count(*) FILTER (WHERE available_at <= now() AND (claimed_until IS NULL OR claimed_until < now())) AS claimable,
  EXTRACT(EPOCH FROM min(GREATEST(available_at, COALESCE(claimed_until, available_at))) FILTER (
    WHERE available_at > now() OR claimed_until >= now()) - now()) AS next_in,
  EXTRACT(EPOCH FROM now() - min(first_dirtied_at)) AS oldest_age
FROM infestation_dirty_keys
"""


async def claim_dirty_keys(worker_id: str, batch_size: int, *, throttle: bool = True) -> list[ClaimedKey]:
    """Claim up to `batch_size` available keys in one statement, committed at once (SKIP LOCKED: workers never
    collide); when throttling, keys refreshed less than the hot-key interval ago are deferred instead (product
    decision 1). Its own commit, not the batch's: a writer re-marking a claimed key must not wait for the refresh."""
    cfg = settings()
    params = {
        "me": worker_id,
        "n": batch_size,
        "claim_seconds": cfg.claim_seconds,
        "interval": cfg.hot_key_interval_seconds if throttle else 0,
    }
    async with db.statement_session() as session:  # one statement: autocommit, no BEGIN and COMMIT round trips
        rows = (await session.execute(text(_CLAIM), params)).all()
    return sorted(
        (
            ClaimedKey(
                r.pattern_key,
                int(r.version),
                int(r.attempts),
                r.reason,
                None if r.repository_ids is None else tuple(int(i) for i in r.repository_ids),
            )
            for r in rows
        ),
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
            DRAINED_KEYS.inc()
            return True
        delay = max(0.0, settings().hot_key_interval_seconds - elapsed) if throttle else 0.0
        await session.execute(text(_RELEASE), {"key": claim.pattern_key, "me": worker_id, "delay": delay})
    if delay > 0:
        HOT_KEYS_THROTTLED.inc()
    return False


async def settle_failed(claim: ClaimedKey, worker_id: str) -> None:
    """A failed refresh keeps the key, claimable again after min(2^attempts, 300) s."""
    async with db.transaction() as session:
        await session.execute(_RELEASE_FAILED, {"key": claim.pattern_key, "me": worker_id})


Backlog = tuple[int, int, float | None]


async def dirty_backlog(session: AsyncSession | None = None) -> Backlog:
    """(backlog, claimable now, seconds until the next waiting key becomes claimable); also sets the gauges. In
    `session` when given (the drain's last batch: read after its settle, without a session of its own)."""
    if session is None:
        async with db.read_session(replica=False) as own:
            row = (await own.execute(text(_BACKLOG))).one()
    else:
        row = (await session.execute(text(_BACKLOG))).one()
    DIRTY_BACKLOG.set(row.backlog)
    DIRTY_OLDEST_AGE.set(float(row.oldest_age or 0))
    next_in = None if row.next_in is None else max(0.0, float(row.next_in))
    return int(row.backlog), int(row.claimable), next_in


async def drain(*, batch_size: int = 200, throttle: bool = True, worker_id: str | None = None) -> DrainResult:
    """Claim up to `batch_size` dirty keys, refresh each (sorted), delete only what was refreshed."""
    me = worker_id or new_worker_id()
    result = DrainResult()
    await _hand_back_unreleased()
    claims = await claim_dirty_keys(me, batch_size, throttle=throttle)
    settled = 0
    backlog: Backlog | bool | None = None
    try:
        for start in range(0, len(claims), REFRESH_BATCH):
            batch = claims[start : start + REFRESH_BATCH]
            last = start + REFRESH_BATCH >= len(claims)
            if len(batch) == 1 or not (backlog := await _drain_batch(batch, me, throttle, result, backlog=last)):
                for claim in batch:  # one at a time: a failing key backs off alone
                    await _drain_one(claim, me, throttle, result)
            settled += len(batch)
    except asyncio.CancelledError:
        # a worker stopping (SIGTERM) hands its unfinished claims back at once instead of after the claim TTL
        await asyncio.shield(_release_claims([c.pattern_key for c in claims[settled:]], me))
        raise
    except Exception:
        # the database went away mid-drain (an outage): hand the unfinished claims back now, or, while it is still
        # away, at this process's next drain, instead of leaving them to the claim TTL (minutes)
        unfinished = [c.pattern_key for c in claims[settled:]]
        try:
            await _release_claims(unfinished, me)
        except Exception:
            _unreleased.append((me, unfinished))
        raise
    await _purge_refreshed(claims, result.refreshed_keys)  # the shared cache (docs/scaling.md "Shared cache")
    if not isinstance(backlog, tuple):  # read in the last batch's transaction unless that batch went one by one
        backlog = await dirty_backlog()
    _, result.remaining_claimable, result.next_available_in_seconds = backlog
    if result.refreshed:
        await _record_progress(me, result.refreshed)
    return result


async def _purge_refreshed(claims: list[ClaimedKey], refreshed: list[str]) -> None:
    """The shared cache drops the atlas, the refreshed keys' pages and those of the repositories the claims named
    (their pages list these rows), so the atlas moves within seconds there too (docs/scaling.md "Shared cache")."""
    if not refreshed:
        return
    done = set(refreshed)
    tags = {ATLAS_TAG}
    for claim in claims:
        if claim.pattern_key in done:
            tags.add(pattern_tag(claim.pattern_key))
            tags.update(repository_tag(r) for r in claim.repositories or ())
    await purge(tags)


# The last drain that refreshed a key, fleet-wide (`job_runs` "drain", read by the gauges as
# tarakan_job_last_success_timestamp_seconds{fleet_job="drain"}): the pipeline-stopped alert watches it, a signal the
# hourly recompute (which stamps every pattern's refreshed_at) does not move. Written at most once per interval per
# process.
PROGRESS_RECORD_SECONDS = 30.0
_progress_recorded_at: float | None = None


async def _record_progress(me: str, refreshed: int) -> None:
    global _progress_recorded_at
    now = time.monotonic()
    if _progress_recorded_at is not None and now - _progress_recorded_at < PROGRESS_RECORD_SECONDS:
        return
    _progress_recorded_at = now
    try:
        await record_job_run("drain", me, started_at=db.utcnow(), slot=None, result={"refreshed": refreshed})
    except Exception as exc:  # the refreshes are done; a missed record only ages the alert's signal
        log.warning("recording the drain's progress failed: %s", exc)


# Claims a failed drain of this process could not hand back (the database was away): released by its next drain.
_unreleased: list[tuple[str, list[str]]] = []


async def _hand_back_unreleased() -> None:
    while _unreleased:
        me, keys = _unreleased[0]
        await _release_claims(keys, me)
        _unreleased.pop(0)


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
        await refresh_pattern(claim.pattern_key, reason=claim.reason, repositories=claim.repositories)
    except Exception:
        log.exception("refresh of %s failed (attempt %d); retrying with backoff", claim.pattern_key, claim.attempts)
        result.failed += 1
        await settle_failed(claim, me)
        return
    result.refreshed += 1
    result.refreshed_keys.append(claim.pattern_key)
    if not await settle_refreshed(claim, me, elapsed=time.monotonic() - started, throttle=throttle):
        result.released += 1


async def _drain_batch(
    claims: list[ClaimedKey], me: str, throttle: bool, result: DrainResult, *, backlog: bool = False
) -> Backlog | bool:
    """Refresh several claimed keys and settle them in one transaction (docs/domain.md §5.5): their locks taken in
    one statement, then `refresh_pattern`'s statements each run once over all of them (`refresh_locked_batch`), the
    settle in one or two; with `backlog` (the drain's last batch), `dirty_backlog` read after the settle, returned
    instead of True. False, with nothing written, when any of it fails: the caller then drains them one at a
    time."""
    ordered = sorted(claims, key=lambda c: lock_order(c.pattern_key))
    try:
        async with db.transaction() as session:
            projected = await lock_keys(session, [c.pattern_key for c in ordered])
            started = time.monotonic()
            refreshed = await refresh_locked_batch(
                session, [(c.pattern_key, c.repositories) for c in ordered], projected
            )
            done = await session.execute(
                text(_COMPLETE_MANY),
                {"keys": [c.pattern_key for c in ordered], "versions": [c.version for c in ordered], "me": me},
            )
            deleted = {str(k) for k in done.scalars()}
            now = time.monotonic()
            # re-dirtied during the refresh: handed back, `hot_key_interval` after its refresh started when throttling
            delay = max(0.0, (settings().hot_key_interval_seconds if throttle else 0.0) - (now - started))
            again = [c.pattern_key for c in ordered if c.pattern_key not in deleted]
            if again:
                await session.execute(text(_RELEASE_MANY), {"keys": again, "delays": [delay] * len(again), "me": me})
            # read committed: the backlog's statement sees this batch's settle and every other commit before it
            left = await dirty_backlog(session) if backlog else None
    except Exception as exc:  # the one-at-a-time drain logs and counts the key that fails
        log.info("a batch of %d keys failed (%s); refreshing them one at a time", len(claims), exc)
        return False
    for claim in ordered:
        instances, scope = refreshed[claim.pattern_key]
        # the batch's statements refresh every key at once: each key's refresh took the batch's time
        observe_refresh(claim.reason, scope, instances, now - started)
        result.refreshed += 1
        result.refreshed_keys.append(claim.pattern_key)
        if claim.pattern_key in deleted:
            DRAINED_KEYS.inc()
            continue
        result.released += 1
        if delay > 0:
            HOT_KEYS_THROTTLED.inc()
    return True if left is None else left


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
