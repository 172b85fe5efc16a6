"""The alert rules watch metrics that exist: every `tarakan_*` name an expression in deploy/prometheus/alerts.yml
uses appears in a real scrape of a web process or a worker. The logs of both are JSON lines with LOG_FORMAT=json.
(promtool checks the rules' syntax and unit-tests each alert in ./test.)"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from app.devservices import free_port
from app.kernel import db, outbox
from tests import factories as f
from tests.harness import ROOT, spawn, stop, wait_http
from tests.ops.test_worker import two_repository_pattern

ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
pytestmark = pytest.mark.usefixtures("empty_queue")


def alert_metric_names() -> set[str]:
    names: set[str] = set()
    for line in ALERTS.read_text().splitlines():
        if line.strip().startswith("#") or "summary:" in line or "runbook_url:" in line:
            continue
        names |= set(re.findall(r"\btarakan_[a-z0-9_]+", line))
    return names


def sample_names(body: str) -> set[str]:
    return {s.name for family in text_string_to_metric_families(body) for s in family.samples}


def sample_value(body: str, name: str) -> float:
    return sum(s.value for family in text_string_to_metric_families(body) for s in family.samples if s.name == name)


class Fleet(NamedTuple):
    web: str
    worker_metrics: str
    web_log: Path
    worker_log: Path


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """One `tarakan serve` and one `tarakan worker --metrics-port`, logging JSON lines to files."""
    logs = tmp_path_factory.mktemp("fleet")
    web_port, metrics_port = free_port(), free_port()
    base = f"http://127.0.0.1:{web_port}"
    env = {"LOG_FORMAT": "json", "BASE_URL": base}
    web = spawn("serve", "--port", str(web_port), env=env, log=logs / "web.log")
    worker = spawn("worker", "--metrics-port", str(metrics_port), env=env, log=logs / "worker.log")
    try:
        wait_http(f"{base}/healthz")
        wait_http(f"http://127.0.0.1:{metrics_port}/metrics")
        yield Fleet(base, f"http://127.0.0.1:{metrics_port}/metrics", logs / "web.log", logs / "worker.log")
    finally:
        stop(web)
        stop(worker, signal.SIGTERM, 15)


async def worker_refreshed(fleet: Fleet) -> str:
    """Make the worker refresh one key; return its scrape once it shows the refresh."""
    await two_repository_pattern(await f.create_account())
    await outbox.schedule_refresh_after_commit()
    deadline = time.monotonic() + 20
    while True:
        body = (await asyncio.to_thread(httpx.get, fleet.worker_metrics)).text
        if 'tarakan_infestations_refresh_seconds_count{reason="assimilate"}' in body:
            return body
        assert time.monotonic() < deadline, "the worker did not refresh the key"
        await asyncio.sleep(0.1)


async def test_every_metric_an_alert_uses_exists_in_a_real_scrape(fleet: Fleet) -> None:
    names = alert_metric_names()
    assert len(names) >= 9, names  # the parser found the expressions
    async with db.transaction() as session:  # a finished hourly and nightly run, as the worker records them
        await session.execute(
            text(
                "INSERT INTO job_runs (name, holder, started_at, finished_at) VALUES "
                "('recompute_windows', 'w', now(), now()), ('reconcile', 'w', now(), now())"
            )
        )
    worker_body = await worker_refreshed(fleet)
    async with httpx.AsyncClient(base_url=fleet.web) as client:
        assert (await client.get("/")).status_code == 200
        web_body = (await client.get("/metrics")).text

    exposed = sample_names(web_body) | sample_names(worker_body)
    assert sorted(names - exposed) == []
    # the worker's own recordings are on the worker's port, the fleet gauges on the web process
    assert "tarakan_infestations_refresh_seconds_bucket" in sample_names(worker_body)
    assert "tarakan_job_last_success_timestamp_seconds" in sample_names(web_body)
    assert "tarakan_http_request_duration_seconds_bucket" in sample_names(web_body)
    # the event-loop watchdog runs in both (started by the web lifespan and by the worker's startup)
    for body in (web_body, worker_body):
        assert sample_value(body, "tarakan_event_loop_lag_seconds_count") > 0


def json_lines(path: Path) -> list[dict[str, object]]:
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    return [json.loads(line) for line in lines]  # every line is one JSON object, or this raises


async def test_with_log_format_json_both_processes_log_one_json_object_per_line(fleet: Fleet) -> None:
    async with httpx.AsyncClient(base_url=fleet.web) as client:
        response = await client.get("/infestations", headers={"X-Request-ID": "trace-4711"})
    assert response.headers["X-Request-ID"] == "trace-4711"
    await worker_refreshed(fleet)

    deadline = time.monotonic() + 5
    while not any(e.get("request_id") == "trace-4711" for e in json_lines(fleet.web_log)):
        assert time.monotonic() < deadline, fleet.web_log.read_text()[-2000:]
        await asyncio.sleep(0.05)
    [access] = [e for e in json_lines(fleet.web_log) if e.get("request_id") == "trace-4711"]
    assert access["logger"] == "tarakan.access" and access["level"] == "INFO"
    assert access["route"] == "/infestations{format}" and access["status"] == 200
    assert isinstance(access["duration_ms"], float) and {"time", "message"} <= set(access)
    worker_entries = json_lines(fleet.worker_log)
    assert worker_entries and all({"time", "level", "logger", "message"} <= set(e) for e in worker_entries)
    assert any(e["logger"].startswith("arq") for e in worker_entries)  # type: ignore[attr-defined]
