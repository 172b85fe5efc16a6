"""The alert rules watch metrics that exist: every `tarakan_*` name an expression in deploy/prometheus/alerts.yml
uses appears in a real scrape of a web process or a worker; no metric has a label a scrape overwrites (`job`,
`instance`); and the series promtool's unit tests feed the rules (deploy/prometheus/alerts_test.yml) carry only label
sets a scrape produces. The logs of both processes are JSON lines with LOG_FORMAT=json. (promtool checks the rules'
syntax and unit-tests each alert in ./test; tests/ops/test_prometheus_live.py runs them in a real Prometheus.)"""

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
import yaml  # type: ignore[import-untyped]
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from app.devservices import free_port
from app.kernel import db, metrics
from app.record import outbox
from tests import factories as f
from tests.harness import ROOT, spawn, stop, wait_http
from tests.ops.test_worker import two_repository_pattern

ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
ALERT_TESTS = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
PROMETHEUS_YML = ROOT / "deploy" / "prometheus" / "prometheus.yml"
# the target labels Prometheus sets on every scraped series (a product label of that name becomes exported_job or
# exported_instance, so a rule matching it matches nothing)
SCRAPE_LABELS = frozenset({"job", "instance"})
WEB_JOB, WORKER_JOB = "tarakan-web", "tarakan-worker"
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


async def scrapes(fleet: Fleet) -> dict[str, str]:
    """What each scrape job of prometheus.yml reads once the fleet has worked: the fleet jobs finished, a key
    refreshed by the worker, a page served by the web process."""
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
    return {WEB_JOB: web_body, WORKER_JOB: worker_body}


async def test_every_metric_an_alert_uses_exists_in_a_real_scrape(fleet: Fleet) -> None:
    names = alert_metric_names()
    assert len(names) >= 9, names  # the parser found the expressions
    bodies = await scrapes(fleet)
    web_body, worker_body = bodies[WEB_JOB], bodies[WORKER_JOB]

    exposed = sample_names(web_body) | sample_names(worker_body)
    assert sorted(names - exposed) == []
    # the worker's own recordings are on the worker's port, the fleet gauges on the web process
    assert "tarakan_infestations_refresh_seconds_bucket" in sample_names(worker_body)
    assert "tarakan_job_last_success_timestamp_seconds" in sample_names(web_body)
    assert "tarakan_http_request_duration_seconds_bucket" in sample_names(web_body)
    # the event-loop watchdog runs in both (started by the web lifespan and by the worker's startup)
    for body in (web_body, worker_body):
        assert sample_value(body, "tarakan_event_loop_lag_seconds_count") > 0


def label_names(body: str) -> dict[str, set[frozenset[str]]]:
    """Each sample name of a scrape with the label-name sets it is served with."""
    served: dict[str, set[frozenset[str]]] = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            served.setdefault(s.name, set()).add(frozenset(s.labels))
    return served


async def test_no_metric_has_a_label_that_a_scrape_overwrites(fleet: Fleet) -> None:
    bodies = await scrapes(fleet)
    served = {(job, name, label) for job, body in bodies.items() for name, sets in label_names(body).items()
              for labels in sets for label in labels & SCRAPE_LABELS}  # fmt: skip
    assert served == set()
    # labelled metrics nothing observed yet serve no sample: their definitions say it for them
    defined = {
        (m._name, label)
        for m in vars(metrics).values()
        if isinstance(m, MetricWrapperBase)
        for label in SCRAPE_LABELS & set(m._labelnames)
    }
    assert defined == set()
    # the fleet-job gauge was in the scrape, under its own label (and "drain" once the worker recorded a drain)
    [gauge] = [f for f in text_string_to_metric_families(bodies[WEB_JOB]) if f.name == metrics.JOB_LAST_SUCCESS._name]
    assert {"recompute_windows", "reconcile"} <= {s.labels["fleet_job"] for s in gauge.samples}


def scrape_ports() -> dict[str, int]:
    """The shipped prometheus.yml's scrape jobs and the port each one's targets answer on."""
    config = yaml.safe_load(PROMETHEUS_YML.read_text())
    return {job["job_name"]: job["dns_sd_configs"][0]["port"] for job in config["scrape_configs"]}


_SERIES = re.compile(r"(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\{(?P<labels>[^}]*)\}")
_LABEL = re.compile(r'\s*(?P<name>[a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"(?P<value>[^"]*)"\s*(,|$)')


def parse_series(selector: str) -> tuple[str, dict[str, str]]:
    """`name{a="b", ...}` as promtool's input series are written."""
    match = _SERIES.fullmatch(selector.strip())
    assert match, selector
    labels: dict[str, str] = {}
    position, body = 0, match["labels"]
    while position < len(body):
        label = _LABEL.match(body, position)
        assert label and label.end() > position, selector
        labels[label["name"]] = label["value"]
        position = label.end()
    return match["name"], labels


def input_series() -> list[str]:
    tests = yaml.safe_load(ALERT_TESTS.read_text())["tests"]
    return [series["series"] for test in tests for series in test["input_series"]]


async def test_promtool_inputs_carry_only_label_sets_a_scrape_produces(fleet: Fleet) -> None:
    """Each input series of alerts_test.yml: a job of prometheus.yml, an instance `host:port` on that job's port,
    and otherwise exactly the labels that job's process serves the sample with (`up`: none)."""
    ports = scrape_ports()
    assert set(ports) == {WEB_JOB, WORKER_JOB}
    served = {job: label_names(body) for job, body in (await scrapes(fleet)).items()}
    selectors = input_series()
    assert len(selectors) >= 40, selectors  # the parser found them

    wrong = []
    for selector in selectors:
        name, labels = parse_series(selector)
        job, instance = labels.get("job"), labels.get("instance", "")
        if job not in ports:
            wrong.append(f"{selector}: job must be one of {sorted(ports)}")
            continue
        if not re.fullmatch(rf"[a-zA-Z0-9.-]+:{ports[job]}", instance):
            wrong.append(f"{selector}: instance must be host:{ports[job]}, the target's address")
        own = frozenset(labels) - SCRAPE_LABELS
        expected = {frozenset()} if name == "up" else served[job].get(name, set())
        if own not in expected:
            wrong.append(f"{selector}: {job} serves {name} with labels {[sorted(e) for e in expected]}")
    assert wrong == []


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
