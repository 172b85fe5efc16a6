"""The event-loop watchdog: a blocking call in a route (or a worker job) is one stall line naming that route (or
job) and a lag observation over 250 ms in `tarakan_event_loop_lag_seconds`."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY

from app.infestations import dirty_queue
from app.kernel import watchdog
from app.registry import queries

BLOCK = 0.45  # seconds a deliberate blocking call holds the loop


def lag(sample: str) -> float:
    labels = {"le": "0.25"} if sample == "bucket" else {}
    return REGISTRY.get_sample_value(f"tarakan_event_loop_lag_seconds_{sample}", labels) or 0.0


@pytest.fixture
async def watched(caplog: pytest.LogCaptureFixture) -> AsyncIterator[pytest.LogCaptureFixture]:
    """The watchdog running on this loop (the web lifespan and the worker's startup start it in production)."""
    watchdog.start()
    await asyncio.sleep(0.15)  # one ordinary wake-up first
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tarakan.watchdog"):
        yield caplog
    await watchdog.stop()


async def stall_lines(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    deadline = time.monotonic() + 2
    while True:
        lines = [r.getMessage() for r in caplog.records if r.name == "tarakan.watchdog"]
        if any(name in line for line in lines) or time.monotonic() > deadline:
            return lines
        await asyncio.sleep(0.05)


async def test_a_blocking_call_in_a_route_logs_one_stall_line_naming_the_route_and_observes_the_lag(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch, watched: pytest.LogCaptureFixture
) -> None:
    async def blocking_search(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        time.sleep(BLOCK)  # the deliberate mistake: a synchronous wait on the event loop
        return []

    monkeypatch.setattr(queries, "search_repositories", blocking_search)
    count, fast = lag("count"), lag("bucket")
    assert (await client.get("/search.json?q=acme")).status_code == 200
    lines = await stall_lines(watched, "/search{format}")
    named = [line for line in lines if "GET /search{format}" in line]
    assert len(named) == 1, lines
    assert named[0].startswith("event loop stalled for ")
    assert int(named[0].split("stalled for ")[1].split(" ms")[0]) > 250
    assert lag("count") - count > lag("bucket") - fast  # at least one wake-up later than 250 ms was observed


async def test_a_blocking_worker_job_is_named_in_the_stall_line(
    monkeypatch: pytest.MonkeyPatch, watched: pytest.LogCaptureFixture
) -> None:
    from jobs.worker import WorkerSettings

    async def blocking_drain(**kwargs: Any) -> SimpleNamespace:
        time.sleep(BLOCK)
        return SimpleNamespace(refreshed=0, failed=0, released=0, remaining_claimable=0, next_available_in_seconds=None)

    monkeypatch.setattr(dirty_queue, "drain", blocking_drain)
    [drain] = [f for f in WorkerSettings.functions if f.name == "drain_dirty_keys"]
    await drain.coroutine({"worker_id": "w"})
    lines = await stall_lines(watched, "job drain_dirty_keys")
    assert len([line for line in lines if "job drain_dirty_keys" in line]) == 1, lines
