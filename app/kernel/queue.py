"""Enqueueing from the web processes and services: the only place outside the worker that touches arq."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

from arq import create_pool
from arq.connections import ArqRedis, RedisSettings

from app.kernel.config import settings

DRAIN_JOB = "drain_dirty_keys"
WEBHOOKS_JOB = "deliver_webhooks"
_COALESCE_SECONDS = 0.5
_pools: dict[tuple[int, str], ArqRedis] = {}
# the newest bucket each job was enqueued for from this process (per event loop): arq answers a second enqueue of
# the same job id with nothing, so at a hundred commits a second the web's rings cost a round trip per bucket only
_rung: dict[tuple[int, str, str], int] = {}


async def pool() -> ArqRedis:
    """One pool per event loop and Redis URL (tests and the CLI run several loops in one process)."""
    url = settings().redis_url
    key = (id(asyncio.get_running_loop()), url)
    existing = _pools.get(key)
    if existing is None:
        rs = RedisSettings.from_dsn(url)
        rs.conn_timeout = 1
        rs.conn_retries = 0
        existing = await create_pool(rs)
        _pools[key] = existing
    return existing


async def close_pools() -> None:
    loop_id = id(asyncio.get_running_loop())
    for key in [k for k in _pools if k[0] == loop_id]:
        await _pools.pop(key).aclose()
    for rung in [r for r in _rung if r[0] == loop_id]:
        del _rung[rung]


async def enqueue_drain(*, delay_seconds: float = 0.0, redis: ArqRedis | None = None) -> None:
    """One coalesced drain job per half-second bucket, deferred to the bucket's end (`delay_seconds`: a later bucket);
    docs/domain.md §5.5 "Ring"."""
    await _enqueue(DRAIN_JOB, delay_seconds, redis)


async def enqueue_webhooks(*, delay_seconds: float = 0.0, redis: ArqRedis | None = None) -> None:
    """One coalesced webhook delivery run per half-second bucket, as `enqueue_drain` (after a commit that wrote
    change-feed entries; deferred to the next retry's time by the run itself)."""
    await _enqueue(WEBHOOKS_JOB, delay_seconds, redis)


async def _enqueue(job: str, delay_seconds: float, redis: ArqRedis | None) -> None:
    bucket = int((time.time() + max(0.0, delay_seconds)) / _COALESCE_SECONDS) + 1
    rung = (id(asyncio.get_running_loop()), settings().redis_url, job)
    if redis is None and _rung.get(rung) == bucket:
        return
    await (redis or await pool()).enqueue_job(
        job,
        _job_id=f"{job}:{bucket}",
        _defer_until=datetime.fromtimestamp(bucket * _COALESCE_SECONDS, tz=UTC),
    )
    if redis is None:  # only once it is enqueued: a failed ring is tried again by the next commit
        _rung[rung] = bucket
