"""What the multi-process system tests share: the fleet's settings, waiting for the drain, and a burst of reports
spread over several servers through the real API."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from app.registry.models import Repository
from jobs import queue
from tests.sql import scalar

PASSWORD = "correct horse battery staple"
WORKER_ENV = {"INFESTATIONS_CLAIM_SECONDS": "3", "INFESTATIONS_HOT_KEY_INTERVAL": "1"}


async def eventually(check: Callable[[], Awaitable[bool]], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        await asyncio.sleep(0.1)


async def dirty_count() -> int:
    return int(await scalar("SELECT count(*) FROM infestation_dirty_keys"))


async def no_dirty_key() -> bool:
    return await dirty_count() == 0


TITLES = [
    "SQL injection in login handler",
    "Hard-coded AWS secret key",
    "Path traversal in upload handler",
    "Open redirect after login",
]
BURST = 40
REPOSITORIES = 8


def burst_report(i: int) -> dict[str, Any]:
    """Report i: two findings whose titles rotate, so every title lands in several repositories."""
    findings = [
        {
            "file": f"src/module{i}_{n}.py",
            "line_start": 10 + n,
            "line_end": 12 + n,
            "severity": "high",
            "title": TITLES[(i + n) % len(TITLES)],
            "description": "found by the multi-instance burst",
        }
        for n in range(2)
    ]
    return {
        "commit_sha": f"{i:040x}",
        "model": "gpt-test",
        "prompt_version": "review/v1",
        "run_id": f"burst-{i}",
        "document": {"tarakan_scan_format": 1, "findings": findings},
    }


async def submit_burst(servers: Sequence[str], bearer: dict[str, str], repos: Sequence[Repository]) -> None:
    """POST the BURST reports round-robin over `servers` and `repos` (8 at a time); every one must be a 201."""
    limit = asyncio.Semaphore(8)
    async with httpx.AsyncClient(timeout=30) as http:

        async def submit(i: int) -> httpx.Response:
            repo = repos[i % len(repos)]
            async with limit:
                return await http.post(
                    f"{servers[i % len(servers)]}/api/v1/repos/{repo.host}/{repo.owner}/{repo.name}/reports",
                    headers=bearer,
                    content=json.dumps(burst_report(i)),
                )

        responses = await asyncio.gather(*(submit(i) for i in range(BURST)))
    assert [r.status_code for r in responses] == [201] * BURST, [r.text for r in responses if r.status_code != 201]


async def run_singletons_three_times(slot: str) -> dict[str, list[bool]]:
    """Three triggers of the hourly and the nightly singleton for one slot, all due at the same instant (as when
    every worker's cron fires on time); what each trigger returned (True: it ran the slot), sorted."""
    due = datetime.now(UTC) + timedelta(seconds=1)
    redis = await queue.pool()
    triggers: dict[str, list[Any]] = {}
    for n in range(3):
        for job_name in ("recompute_windows_job", "reconcile_job"):
            job = await redis.enqueue_job(
                job_name, slot=slot, _job_id=f"{job_name}:{slot}:{n}:{uuid.uuid4().hex}", _defer_until=due
            )
            assert job is not None
            triggers.setdefault(job_name, []).append(job)
    return {name: sorted([await job.result(timeout=30) for job in jobs]) for name, jobs in triggers.items()}
