"""Fleet-wide singletons: lease compare-and-swap, takeover after expiry, and one run per scheduled slot."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from app.kernel import db
from app.ops import leases
from jobs import worker

SLOT = datetime(2026, 3, 1, 3, 30, tzinfo=UTC)


async def lease_row(name: str) -> dict[str, Any] | None:
    async with db.read_session(replica=False) as session:
        row = (
            (
                await session.execute(
                    text("SELECT *, expires_at > now() AS live FROM instance_leases WHERE name = :n"), {"n": name}
                )
            )
            .mappings()
            .first()
        )
    return dict(row) if row else None


async def job_run(name: str) -> dict[str, Any] | None:
    async with db.read_session(replica=False) as session:
        row = (await session.execute(text("SELECT * FROM job_runs WHERE name = :n"), {"n": name})).mappings().first()
    return dict(row) if row else None


async def expire(name: str) -> None:
    """The holder died: its lease runs out without being renewed."""
    async with db.transaction() as session:
        await session.execute(
            text("UPDATE instance_leases SET expires_at = now() - interval '1 second' WHERE name = :n"), {"n": name}
        )


async def test_acquire_renew_release_and_takeover_after_expiry() -> None:
    assert await leases.acquire("nightly", "worker-a", 60)
    assert not await leases.acquire("nightly", "worker-b", 60)
    assert await leases.acquire("nightly", "worker-a", 60)  # re-entrant for the holder
    assert await leases.renew("nightly", "worker-a", 60)
    assert not await leases.renew("nightly", "worker-b", 60)

    await leases.release("nightly", "worker-b")  # not the holder: no effect
    row = await lease_row("nightly")
    assert row is not None and row["holder"] == "worker-a" and row["live"]

    await expire("nightly")
    assert await leases.acquire("nightly", "worker-b", 60)
    assert not await leases.renew("nightly", "worker-a", 60), "the dead holder must not get its lease back"
    row = await lease_row("nightly")
    assert row is not None and row["holder"] == "worker-b"

    await leases.release("nightly", "worker-b")
    assert await lease_row("nightly") is None
    assert await leases.acquire("nightly", "worker-a", 60)


async def test_hold_lease_renews_in_the_background_and_releases_at_the_end() -> None:
    async with leases.hold_lease("hourly", 0.6, holder="worker-a") as lease:
        assert lease.holder == "worker-a"
        with pytest.raises(leases.LeaseBusy):
            async with leases.hold_lease("hourly", 0.6, holder="worker-b"):
                pass
        await asyncio.sleep(1.0)  # longer than the ttl: only renewal keeps it alive
        row = await lease_row("hourly")
        assert row is not None and row["holder"] == "worker-a" and row["live"]
    assert await lease_row("hourly") is None


async def test_losing_the_lease_cancels_the_work_under_it() -> None:
    finished = False
    with pytest.raises(leases.LeaseLost):
        async with leases.hold_lease("hourly", 0.6, holder="worker-a"):
            await expire("hourly")
            assert await leases.acquire("hourly", "worker-b", 60)  # taken over after expiry
            await asyncio.sleep(2)
            finished = True
    assert not finished
    row = await lease_row("hourly")
    assert row is not None and row["holder"] == "worker-b", "the loser must not release the new holder's lease"


async def test_a_singleton_runs_once_per_slot_even_when_triggered_twice_at_once() -> None:
    runs: list[str] = []

    async def job() -> dict[str, int]:
        runs.append("ran")
        await asyncio.sleep(0.3)
        return {"patterns": 7}

    results = await asyncio.gather(
        leases.run_singleton("recompute_windows", SLOT, job, holder="worker-a"),
        leases.run_singleton("recompute_windows", SLOT, job, holder="worker-b"),
    )
    assert sorted(results) == [False, True]
    # triggered again for the same slot after the first run finished: still once
    assert await leases.run_singleton("recompute_windows", SLOT, job, holder="worker-b") is False
    assert runs == ["ran"]
    run = await job_run("recompute_windows")
    assert run is not None and run["finished_at"] is not None
    assert json.loads(run["detail"]) == {"slot": SLOT.isoformat(), "state": "done", "result": {"patterns": 7}}

    # an older slot delivered late does not run; the next slot does
    assert await leases.run_singleton("recompute_windows", SLOT - timedelta(hours=1), job) is False
    assert await leases.run_singleton("recompute_windows", SLOT + timedelta(hours=1), job) is True
    assert runs == ["ran", "ran"]


async def test_a_slot_whose_holder_died_mid_run_runs_again() -> None:
    async def crash() -> None:
        raise RuntimeError("worker killed")

    with pytest.raises(RuntimeError):
        await leases.run_singleton("reconcile", SLOT, crash, holder="worker-a")
    run = await job_run("reconcile")
    assert run is not None and json.loads(run["detail"])["state"] == "running"

    async def succeed() -> str:
        return "ok"

    assert await leases.run_singleton("reconcile", SLOT, succeed, holder="worker-b") is True
    run = await job_run("reconcile")
    assert run is not None and run["holder"] == "worker-b" and run["finished_at"] is not None


async def test_the_worker_singleton_jobs_run_once_for_the_same_cron_slot() -> None:
    # two workers that both picked up the 03:30 trigger (arq passes the scheduled time as the job's score)
    score = int(SLOT.timestamp() * 1000) + 250
    ctx_a: dict[str, Any] = {"worker_id": "worker-a", "job_id": "cron:a", "score": score, "job_try": 1}
    ctx_b: dict[str, Any] = {"worker_id": "worker-b", "job_id": "cron:b", "score": score + 700, "job_try": 1}

    assert await worker.reconcile_job(ctx_a) is True
    assert await worker.reconcile_job(ctx_b) is False
    run = await job_run("reconcile")
    assert run is not None and run["holder"] == "worker-a:cron:a"  # holders are per job, not per process
    detail = json.loads(run["detail"])
    assert detail["slot"] == SLOT.isoformat()
    assert detail["result"] == {"source_keys": 0, "refreshed": 0, "orphans_checked": 0, "orphans_removed": 0}

    assert await worker.recompute_windows_job(ctx_a) is True
    assert await worker.recompute_windows_job(ctx_b) is False
