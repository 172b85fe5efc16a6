"""Every process is scrapable: a real `tarakan worker --metrics-port` serves the metrics it records."""

from __future__ import annotations

import asyncio
import signal
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from app.devservices import free_port
from app.record import outbox
from tests import factories as f
from tests.harness import assert_one_line_error, spawn, stop, tarakan, wait_http
from tests.ops.test_worker import KEY, two_repository_pattern


def samples(body: str) -> dict[str, float]:
    """`name{labels}` -> value, summed over labels by name for the *_count / *_total samples we read."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values


async def test_a_worker_serves_its_refresh_histogram_on_its_metrics_port(empty_queue: None) -> None:
    port = free_port()
    proc = spawn("worker", env={"WORKER_METRICS_PORT": str(port)})
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        await asyncio.to_thread(wait_http, url, 20)
        before = samples(httpx.get(url).text)
        assert before.get("tarakan_infestations_refresh_seconds_count", 0.0) == 0.0

        await two_repository_pattern(await f.create_account())
        await outbox.schedule_refresh_after_commit()
        deadline = time.monotonic() + 20
        while True:
            after = samples(httpx.get(url).text)
            if after.get("tarakan_infestations_drained_keys_total", 0.0) >= 1:
                break
            assert proc.poll() is None, "the worker exited"
            assert time.monotonic() < deadline, f"the worker did not report refreshing {KEY[:12]} in time"
            await asyncio.sleep(0.1)
        assert after["tarakan_infestations_refresh_seconds_count"] >= 1
        assert after["tarakan_infestations_refresh_seconds_sum"] > 0
    finally:
        await asyncio.to_thread(stop, proc, signal.SIGTERM, 15)
    assert proc.returncode == 0


async def test_the_metrics_port_flag_wins_over_the_environment_and_a_taken_port_is_one_line() -> None:
    port = free_port()
    proc = spawn("worker", "--metrics-port", str(port), env={"WORKER_METRICS_PORT": "not-a-port"})
    try:
        await asyncio.to_thread(wait_http, f"http://127.0.0.1:{port}/metrics", 20)
        taken = await tarakan("worker", "--metrics-port", str(port))
        assert_one_line_error(taken, f"cannot serve worker metrics on 127.0.0.1:{port}: Address already in use")
    finally:
        await asyncio.to_thread(stop, proc, signal.SIGTERM, 15)
