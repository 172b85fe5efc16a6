"""The arq worker: a real `tarakan worker` process drains rung keys; the drain job chains continuations."""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any, cast

import pytest
from arq.connections import RedisSettings, create_pool
from arq.typing import StartupShutdown, WorkerCoroutine
from arq.worker import func
from sqlalchemy import text

from app.accounts.models import Account
from app.devservices import free_port
from app.infestations import dirty_queue, projection
from app.kernel import db, queue
from app.kernel.config import settings
from app.record import outbox
from app.reports.finding_memory import pattern_key
from jobs import worker
from tests import factories as f
from tests.harness import spawn, stop

TITLE = "Path traversal in upload handler"
KEY = pattern_key(TITLE)


async def repo_count(key: str = KEY) -> int | None:
    async with db.read_session(replica=False) as session:
        value = (
            await session.execute(
                text("SELECT repo_count FROM infestation_patterns WHERE pattern_key = :k"), {"k": key}
            )
        ).scalar()
    return None if value is None else int(value)


async def dirty_count() -> int:
    async with db.read_session(replica=False) as session:
        return int((await session.execute(text("SELECT count(*) FROM infestation_dirty_keys"))).scalar_one())


async def queued_drains() -> list[tuple[str, float]]:
    """Drain jobs waiting in arq's queue, with the time (epoch seconds) each becomes due."""
    redis = await queue.pool()
    entries = await redis.zrange("arq:queue", 0, -1, withscores=True)
    return [
        (job_id.decode(), score / 1000)
        for job_id, score in entries
        if job_id.decode().startswith(f"{queue.DRAIN_JOB}:")
    ]


@pytest.fixture
async def reporter() -> Account:
    return await f.create_account()


async def two_repository_pattern(reporter: Account) -> None:
    for _ in range(2):
        await f.create_instance(await f.create_repository(), reporter, TITLE)
    async with db.transaction() as session:
        await outbox.mark_dirty(session, [KEY], "assimilate", ring=False)  # each test rings (or not) itself


async def test_a_running_worker_refreshes_a_rung_key_within_seconds(reporter: Account, empty_queue: None) -> None:
    proc = spawn("worker")
    try:
        await two_repository_pattern(reporter)
        await outbox.schedule_refresh_after_commit()
        deadline = time.monotonic() + 20  # process start-up included
        # refreshed, then settled: the dirty row goes in the transaction after the refresh, so wait for both
        while await repo_count() != 2 or await dirty_count() != 0:
            assert proc.poll() is None, "the worker exited"
            assert time.monotonic() < deadline, "the worker did not refresh and settle the key in time"
            await asyncio.sleep(0.1)
    finally:
        await asyncio.to_thread(stop, proc, signal.SIGTERM, 15)
    assert proc.returncode == 0


async def test_worker_burst_runs_the_queued_drain_and_exits(reporter: Account, empty_queue: None) -> None:
    await two_repository_pattern(reporter)
    await queue.enqueue_drain()
    # a drain racing the start-up ring may find the key just refreshed and defer itself by the hot-key interval;
    # burst mode waits for deferred jobs, so keep that interval short here
    proc = spawn("worker", "--burst", env={"INFESTATIONS_HOT_KEY_INTERVAL": "1"})
    assert await asyncio.to_thread(proc.wait, 30) == 0
    assert await repo_count() == 2
    assert await dirty_count() == 0


async def test_the_drain_job_chains_a_continuation_while_claimable_keys_remain(empty_queue: None) -> None:
    keys = [f"{n:064x}" for n in range(1, 206)]  # 205 keys without source rows: quick refreshes
    async with db.transaction() as session:
        await outbox.mark_dirty(session, keys, "reconcile", ring=False)
    ctx: dict[str, Any] = {"worker_id": "worker-1", "redis": await queue.pool(), "job_try": 1}

    first = await worker.drain_dirty_keys(ctx)
    assert (first["refreshed"], first["remaining_claimable"]) == (200, 5)
    [(_, due)] = await queued_drains()
    assert due <= time.time() + 1, "the continuation should run at once"

    second = await worker.drain_dirty_keys(ctx)
    assert (second["refreshed"], second["remaining_claimable"]) == (5, 0)
    assert await dirty_count() == 0


async def test_the_drain_job_defers_itself_to_a_throttled_keys_available_time(
    reporter: Account, empty_queue: None
) -> None:
    await two_repository_pattern(reporter)
    [claim] = await dirty_queue.claim_dirty_keys("worker-1", 10)
    await projection.refresh_pattern(KEY)
    async with db.transaction() as session:  # re-dirtied during its refresh: a hot key
        await outbox.mark_dirty(session, [KEY], "status", ring=False)
    assert await dirty_queue.settle_refreshed(claim, "worker-1", elapsed=0.0, throttle=True) is False
    ctx: dict[str, Any] = {"worker_id": "worker-2", "redis": await queue.pool(), "job_try": 1}

    result = await worker.drain_dirty_keys(ctx)

    assert (result["refreshed"], result["remaining_claimable"]) == (0, 0)
    [(_, due)] = await queued_drains()
    assert time.time() + 28 <= due <= time.time() + 31


async def test_the_drain_job_asks_arq_to_retry_with_backoff_when_the_database_is_unreachable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DATABASE_URL", f"postgresql://tarakan@127.0.0.1:{free_port()}/tarakan")  # nothing listens
    with pytest.raises(worker.Retry) as retry:
        await worker.drain_dirty_keys({"worker_id": "worker-1", "job_try": 3})
    assert retry.value.defer_score == 20_000  # 5 s doubled per try


async def _noop(_ctx: dict[str, Any]) -> None:
    return None


async def test_a_job_cancelled_at_its_shielded_finish_does_not_break_the_shutdown(empty_queue: None) -> None:
    """SIGTERM while a job writes its result (arq's `run_job` awaits `shield(finish_job(...))`): the task ends
    cancelled, and arq's close gathered it bare, so CancelledError left close, the shutdown hook never ran and the
    worker exited 1 (seen once in a full run of the suite)."""
    shut: list[bool] = []

    async def on_shutdown(_ctx: dict[str, Any]) -> None:
        shut.append(True)

    pool = await create_pool(RedisSettings.from_dsn(settings().redis_url))
    running = worker.SurvivingWorker(
        functions=[func(cast(WorkerCoroutine, _noop), name="noop")], redis_pool=pool, handle_signals=False,
        on_shutdown=cast(StartupShutdown, on_shutdown),
        queue_name="tarakan:test:shutdown",
    )  # fmt: skip
    running._handle_signals = True  # as `tarakan worker` runs it; its handler is called below, not installed

    async def finish() -> None:  # arq's run_job at its end: `await asyncio.shield(self.finish_job(...))`
        await asyncio.shield(asyncio.sleep(0.05))

    finishing = asyncio.create_task(finish())
    await asyncio.sleep(0)
    running.tasks["job"] = finishing
    running.handle_sig(signal.SIGTERM)  # cancels the job's task at its shield, as a SIGTERM does
    await running.close()
    assert finishing.cancelled()
    assert shut == [True], "the shutdown hook ran"
