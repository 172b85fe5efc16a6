"""Runs the projection's statements (`projection_sql`): one key from source (`refresh_pattern`), its hourly window
decay (`recompute_windows`), and both over a key range (`project_range`, `recompute_range`). docs/domain.md §5.2-§5.4,
§13 "Recompute algorithm" and "Backfill"."""

from __future__ import annotations

import time

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.infestations.keys import Keys
from app.infestations.projection_sql import (
    delete_projection,
    delete_stale_memberships,
    delete_stale_patterns,
    delete_stale_patterns_and_memberships,
    sync_instances,
    sync_status_windows,
    update_windows,
    upsert_memberships,
    upsert_patterns,
    upsert_patterns_returning,
)
from app.kernel import db
from app.kernel.metrics import REFRESH_DURATION, REFRESH_ERRORS, REFRESH_INSTANCES, REFRESH_SCOPES

# a refresh locks its key and, shared, its bucket; a range locks its buckets (docs/domain.md §13 "Backfill")
_LOCK_KEY = (
    "SELECT pg_advisory_xact_lock_shared(hashtextextended('infestations:bucket:' || :bucket, 0)), "
    "pg_advisory_xact_lock(hashtextextended(:key, 0))"
)
_LOCK_BUCKETS = (
    "SELECT count(pg_advisory_xact_lock(hashtextextended('infestations:bucket:' || b, 0))) "
    "FROM unnest(CAST(:buckets AS text[])) AS b"
)
_OTHER = "other"  # the bucket of a key that does not start with two hex digits (pattern keys are sha256 hex)
_HEX = frozenset("0123456789abcdef")


def _bucket(key: str) -> str:
    return key[:2] if len(key) >= 2 and set(key[:2]) <= _HEX else _OTHER


def _lock_key_params(key: str) -> dict[str, str]:
    return {"key": key, "bucket": _bucket(key)}


# a range statement aggregates 10^5+ instance rows: its hashes stay in memory
_RANGE_WORK_MEM = "SET LOCAL work_mem = '128MB'"


async def _delete_projection(session: AsyncSession, keys: Keys) -> None:
    for delete in delete_projection(keys.shape):
        await session.execute(delete, keys.params)


async def refresh_pattern(
    pattern_key: str, *, reason: str = "manual", repositories: tuple[int, ...] | None = None
) -> int:
    """Recompute one key's rollup rows from source in one transaction (only `repositories`' rows when given: the
    scoped refresh); returns its instances, 0 when it left the public join set and was deleted (domain.md §5.2)."""
    started = time.perf_counter()
    try:
        async with db.transaction() as session:
            await session.execute(text(_LOCK_KEY), _lock_key_params(pattern_key))
            projected = repositories is not None and await _projected(session, pattern_key)
            instances, scope = await refresh_locked(session, pattern_key, repositories if projected else None)
    except Exception:
        REFRESH_ERRORS.inc()
        raise
    observe_refresh(reason, scope, instances, time.perf_counter() - started)
    return instances


def observe_refresh(reason: str, scope: str, instances: int, seconds: float) -> None:
    REFRESH_DURATION.labels(reason=reason).observe(seconds)
    REFRESH_INSTANCES.labels(reason=reason).observe(instances)
    REFRESH_SCOPES.labels(scope=scope).inc()


def lock_order(key: str) -> tuple[bool, str]:
    """The order several keys are locked in: their buckets as a range takes them ("other" first), then the key."""
    return _bucket(key) != _OTHER, key


async def lock_keys(session: AsyncSession, keys: list[str]) -> set[str]:
    """Lock several keys as `refresh_pattern` locks one (already in `lock_order`: unnest keeps it), in one
    statement; returns those of them that are projected now."""
    await session.execute(
        text(
            "SELECT count(pg_advisory_xact_lock_shared(hashtextextended('infestations:bucket:' || b, 0))) "
            "+ count(pg_advisory_xact_lock(hashtextextended(k, 0))) "
            "FROM unnest(CAST(:keys AS text[]), CAST(:buckets AS text[])) AS u(k, b)"
        ),
        {"keys": keys, "buckets": [_bucket(k) for k in keys]},
    )
    found = await session.execute(
        text("SELECT pattern_key FROM infestation_patterns WHERE pattern_key = ANY(CAST(:keys AS text[]))"),
        {"keys": keys},
    )
    return {str(k) for k in found.scalars()}


async def refresh_locked(
    session: AsyncSession, pattern_key: str, repositories: tuple[int, ...] | None
) -> tuple[int, str]:
    """`refresh_pattern`'s statements for a key this transaction has locked (`lock_keys`); `repositories` only
    when the key is projected. Returns (instances, scope)."""
    if repositories is not None:
        return await _refresh_scoped(session, Keys(key=pattern_key, repositories=repositories)), "repositories"
    keys = Keys(key=pattern_key)
    synced = (await session.execute(sync_instances(keys.shape), keys.params)).mappings().one()
    instances = int(synced["instances"])
    if instances == 0:
        await _delete_projection(session, Keys(key=pattern_key))
    else:
        await _project_from_instances(session, keys)
    return instances, "key"


async def refresh_locked_batch(
    session: AsyncSession, claims: list[tuple[str, tuple[int, ...] | None]], projected: set[str]
) -> dict[str, tuple[int, str]]:
    """`refresh_locked` for every key of a batch this transaction has locked (`lock_keys`), set-based: each step is
    one statement over the batch's keys (two where whole and scoped keys meet), not one per key. A claim's
    repositories are its scope only when the key is `projected`, as for one key. Returns each key's (instances,
    scope). The same rows as refreshing the keys one by one (docs/domain.md §5.5 "Refresh")."""
    whole = tuple(key for key, repositories in claims if repositories is None or key not in projected)
    scoped = [(key, repositories) for key, repositories in claims if repositories is not None and key in projected]
    pairs = tuple((key, repository) for key, repositories in scoped for repository in repositories)
    # the source sync and the memberships: whole keys over all their rows, scoped keys over their pairs
    parts = [part for part in (Keys(keys=whole), Keys(pairs=pairs)) if part.keys or part.pairs]
    for part in parts:
        await session.execute(sync_instances(part.shape), part.params)
    for part in parts:
        await session.execute(upsert_memberships(part.shape), part.params)
        await session.execute(delete_stale_memberships(part.shape), part.params)
    # the key-wide aggregates over every key of the batch; a key without a row returned has no instances left
    every = Keys(keys=tuple(key for key, _ in claims))
    written = await session.execute(upsert_patterns_returning(every.shape), every.params)
    instances = {str(key): int(count) for count, key in written}
    emptied = tuple(key for key, _ in claims if key not in instances)
    if emptied:
        await _delete_projection(session, Keys(keys=emptied))
    if instances:
        alive = Keys(keys=tuple(instances))
        await session.execute(sync_status_windows(alive.shape), alive.params)
    scopes = {key: "repositories" for key, _ in scoped}
    return {key: (instances.get(key, 0), scopes.get(key, "key")) for key, _ in claims}


async def _projected(session: AsyncSession, key: str) -> bool:
    found = await session.execute(text("SELECT 1 FROM infestation_patterns WHERE pattern_key = :key"), {"key": key})
    return found.first() is not None


async def _refresh_scoped(session: AsyncSession, scoped: Keys) -> int:
    """The scoped refresh's statements: the same as the full refresh's, with the source sync and the memberships
    limited to the scope's repositories and the key-wide aggregates over the key. Returns the key's instances."""
    assert scoped.key is not None
    await session.execute(sync_instances(scoped.shape), scoped.params)
    await session.execute(upsert_memberships(scoped.shape), scoped.params)
    await session.execute(delete_stale_memberships(scoped.shape), scoped.params)
    key = Keys(key=scoped.key)
    patterns = await session.execute(upsert_patterns_returning(key.shape), key.params)
    instances = patterns.scalar()
    if instances is None:  # the scope's rows were the key's last ones
        await _delete_projection(session, Keys(key=scoped.key))
        return 0
    await session.execute(sync_status_windows(key.shape), key.params)
    return int(instances)


async def _project_from_instances(session: AsyncSession, keys: Keys) -> int:
    """Memberships, pattern rows and status windows of `keys` from their (already synced) instance rows; keys
    without instances lose them. Returns the pattern rows written."""
    params = keys.params
    await session.execute(upsert_memberships(keys.shape), params)
    await session.execute(delete_stale_memberships(keys.shape), params)
    patterns = await session.execute(upsert_patterns(keys.shape), params)
    await session.execute(delete_stale_patterns(keys.shape), params)
    await session.execute(sync_status_windows(keys.shape), params)
    return int(patterns.rowcount or 0)  # type: ignore[attr-defined]


async def recompute_windows(pattern_key: str) -> None:
    """Hourly window decay for one key from its instance rows alone; no instances: its projection deleted; no pattern
    row: a full `refresh_pattern` (docs/domain.md §5.4)."""
    keys = Keys(key=pattern_key)
    async with db.transaction() as session:
        await session.execute(text(_LOCK_KEY), _lock_key_params(pattern_key))
        updated = await session.execute(update_windows(keys.shape), keys.params)
        if int(updated.rowcount or 0) == 1:  # type: ignore[attr-defined]
            await session.execute(sync_status_windows(keys.shape), keys.params)
            return
        has_instances = (
            await session.execute(
                text("SELECT EXISTS (SELECT 1 FROM infestation_pattern_instances WHERE pattern_key = :key)"),
                {"key": pattern_key},
            )
        ).scalar_one()
        if not has_instances:
            await _delete_projection(session, Keys(key=pattern_key))
            return
    await refresh_pattern(pattern_key, reason="window_decay")


# ---- key ranges (set-based backfill and window recompute, docs/domain.md §13 "Backfill") ------------------------


def key_ranges(count: int) -> list[Keys]:
    """`count` (at most 256) ranges covering every key, split on the first two hex digits (keys are sha256 hex, so
    uniform): the first is open below and the last open above, so any key, hex or not, falls into exactly one."""
    count = max(1, min(count, 256))
    bounds = [f"{i * 256 // count:02x}" for i in range(1, count)]
    highs: list[str | None] = [*bounds, None]
    return [Keys(lo=lo, hi=hi) for lo, hi in zip(["", *bounds], highs, strict=True)]


def _buckets(keys: Keys) -> list[str]:
    """The lock buckets a range spans, ascending ("other" first: the first and last ranges hold non-hex keys)."""
    first = int(keys.lo, 16) if keys.lo else 0
    last = int(keys.hi, 16) if keys.hi is not None else 256
    edge = [_OTHER] if not keys.lo or keys.hi is None else []
    return [*edge, *(f"{b:02x}" for b in range(first, last))]


async def _lock_range(session: AsyncSession, keys: Keys) -> None:
    await session.execute(text(_RANGE_WORK_MEM))
    await session.execute(text(_LOCK_BUCKETS), {"buckets": _buckets(keys)})


async def project_range(keys: Keys) -> tuple[int, int]:
    """Every key in the range projected from source in one transaction and a few statements (the set-based
    backfill): the same statements as `refresh_pattern`, over the range. Keys of the range without public
    instances lose their projection (so orphans go too). Returns (instances, patterns)."""
    async with db.transaction() as session:
        await _lock_range(session, keys)
        synced = (await session.execute(sync_instances(keys.shape), keys.params)).mappings().one()
        patterns = await _project_from_instances(session, keys)
    return int(synced["instances"]), patterns


async def recompute_range(keys: Keys) -> int:
    """`recompute_windows` for every pattern row of the range at once: window columns and status windows from the
    instances; a pattern row left without instances loses its projection. Returns the pattern rows updated."""
    async with db.transaction() as session:
        await _lock_range(session, keys)
        updated = await session.execute(update_windows(keys.shape), keys.params)
        await session.execute(sync_status_windows(keys.shape), keys.params)
        await session.execute(delete_stale_patterns_and_memberships(keys.shape), keys.params)
    return int(updated.rowcount or 0)  # type: ignore[attr-defined]
