"""The shipped alert rules in a real Prometheus (Debian's `prometheus`, installed by ./test): it scrapes a real web
process and a real worker with the shipped scrape jobs (on loopback, every second) and evaluates
deploy/prometheus/alerts.yml every second. Once the fleet jobs have run, nothing fires or is pending; with the
worker stopped and a key waiting, the pipeline-stopped alert is pending (its `for:` is 5 minutes: pending is what a
short test sees). promtool's unit tests cannot show this: their input series carry whatever labels they are given."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest
import yaml  # type: ignore[import-untyped]
from sqlalchemy import text

from app.devservices import free_port, pdeathsig
from app.kernel import db, queue
from app.ops.gauges import FLEET_JOBS, READ_EVERY_SECONDS
from app.record import outbox
from tests import factories as f
from tests.harness import ROOT, spawn, stop, tarakan, wait_http
from tests.ops.test_worker import KEY, two_repository_pattern

PROMETHEUS_YML = ROOT / "deploy" / "prometheus" / "prometheus.yml"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
pytestmark = pytest.mark.usefixtures("empty_queue")


class Fleet(NamedTuple):
    web_target: str
    worker_target: str
    worker: subprocess.Popen[bytes]
    prometheus: str
    log: Path


def scrape_config(targets: dict[str, str], rules: Path) -> dict[str, Any]:
    """The shipped prometheus.yml with each job's DNS discovery (compose's service names) replaced by one loopback
    target, scraped and evaluated every second."""
    config: dict[str, Any] = yaml.safe_load(PROMETHEUS_YML.read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"}
    config["rule_files"] = [str(rules)]
    for job in config["scrape_configs"]:
        job.pop("dns_sd_configs", None)
        job.pop("static_configs", None)
        job["static_configs"] = [{"targets": [targets[job["job_name"]]]}]
    return config


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """`tarakan serve`, `tarakan worker --metrics-port` and a Prometheus scraping both (temp storage, free port)."""
    binary = shutil.which("prometheus")
    assert binary, "Debian's prometheus is missing: ./test installs it (apt-get install prometheus)"
    tmp = tmp_path_factory.mktemp("prometheus")
    web_port, metrics_port, prometheus_port = free_port(), free_port(), free_port()
    targets = {"tarakan-web": f"127.0.0.1:{web_port}", "tarakan-worker": f"127.0.0.1:{metrics_port}"}
    web = spawn("serve", "--port", str(web_port), env={"BASE_URL": f"http://{targets['tarakan-web']}"}, quiet=True)
    worker = spawn("worker", "--metrics-port", str(metrics_port), log=tmp / "worker.log")
    # JSON is YAML: the config Prometheus reads, written from the shipped one
    (tmp / "prometheus.yml").write_text(json.dumps(scrape_config(targets, ALERTS)))
    with open(tmp / "prometheus.log", "ab") as out:
        prometheus = subprocess.Popen(
            [
                binary,
                f"--config.file={tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{prometheus_port}",
                "--log.level=warn",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=pdeathsig(signal.SIGTERM),
        )
    try:
        wait_http(f"http://{targets['tarakan-web']}/healthz")
        wait_http(f"http://{targets['tarakan-worker']}/metrics")
        try:
            wait_http(f"http://127.0.0.1:{prometheus_port}/-/ready", timeout=20)
        except TimeoutError:
            raise AssertionError(f"prometheus did not start:\n{(tmp / 'prometheus.log').read_text()}") from None
        yield Fleet(targets["tarakan-web"], targets["tarakan-worker"], worker, f"http://127.0.0.1:{prometheus_port}",
                    tmp / "prometheus.log")  # fmt: skip
    finally:
        stop(prometheus, signal.SIGTERM)
        stop(web)
        stop(worker, signal.SIGTERM, 15)


async def api(fleet: Fleet, path: str, **params: str) -> Any:
    """`data` of a Prometheus HTTP API answer."""
    async with httpx.AsyncClient(base_url=fleet.prometheus, timeout=5) as client:
        answer = (await client.get(f"/api/v1/{path}", params=params)).json()
    assert answer["status"] == "success", answer
    return answer["data"]


def moment(rfc3339: str) -> float:
    """Prometheus's nanosecond RFC 3339 times as Unix seconds."""
    whole, _, rest = rfc3339.rstrip("Z").partition(".")
    return datetime.fromisoformat(whole + "+00:00").timestamp() + float(f"0.{rest or 0}")


async def evaluated_after_scrapes(fleet: Fleet, since: float, timeout: float = 20) -> None:
    """Wait until every target was scraped after `since` and every rule group evaluated after those scrapes."""
    deadline = time.monotonic() + timeout
    while True:
        targets = (await api(fleet, "targets"))["activeTargets"]
        scraped = [moment(t["lastScrape"]) for t in targets]
        if len(targets) == 2 and min(scraped) > since:
            break
        assert time.monotonic() < deadline, f"no scrape after {since}: {targets}"
        await asyncio.sleep(0.2)
    while True:
        groups = (await api(fleet, "rules"))["groups"]
        if groups and min(moment(g["lastEvaluation"]) for g in groups) > max(scraped):
            return
        assert time.monotonic() < deadline, f"no evaluation after {max(scraped)}: {groups}"
        await asyncio.sleep(0.2)


async def active_alerts(fleet: Fleet) -> dict[str, dict[str, Any]]:
    """The pending and firing alerts by name (one series each here)."""
    return {a["labels"]["alertname"]: a for a in (await api(fleet, "alerts"))["alerts"]}


async def finished_jobs() -> set[str]:
    async with db.read_session(replica=False) as session:
        rows = await session.execute(text("SELECT name FROM job_runs WHERE finished_at IS NOT NULL"))
        return {name for (name,) in rows}


async def test_once_each_fleet_job_has_run_no_alert_fires_or_is_pending(fleet: Fleet) -> None:
    # the drain: the worker refreshes a rung key and records it; the nightly reconcile by hand (it records its run);
    # the hourly recompute as its cron runs it, through the worker (the CLI's recompute-windows records no run)
    await two_repository_pattern(await f.create_account())
    await outbox.schedule_refresh_after_commit()
    assert (await tarakan("infestations", "reconcile")).code == 0
    await (await queue.pool()).enqueue_job("recompute_windows_job")
    deadline = time.monotonic() + 30
    while not set(FLEET_JOBS) <= await finished_jobs():  # other cron jobs (the export) record runs too
        assert fleet.worker.poll() is None, "the worker exited"
        assert time.monotonic() < deadline, f"fleet jobs finished: {await finished_jobs()}"
        await asyncio.sleep(0.2)

    # a scrape of the web process reads the fleet gauges at most every READ_EVERY_SECONDS
    await evaluated_after_scrapes(fleet, since=time.time() + READ_EVERY_SECONDS)
    assert await active_alerts(fleet) == {}
    shipped = [r["alert"] for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    rules = [r for g in (await api(fleet, "rules"))["groups"] for r in g["rules"]]
    assert sorted((r["name"], r["health"], r["state"]) for r in rules) == sorted(
        (name, "ok", "inactive") for name in shipped
    )
    # the series the job alerts read, as Prometheus stored them: the product's label next to the scrape's own
    stored = (await api(fleet, "query", query="tarakan_job_last_success_timestamp_seconds"))["result"]
    assert sorted((s["metric"]["fleet_job"], s["metric"]["job"], s["metric"]["instance"]) for s in stored) == [
        (name, "tarakan-web", fleet.web_target) for name in sorted(FLEET_JOBS)
    ]


async def test_a_stopped_drain_with_a_key_waiting_makes_the_pipeline_alert_pending(fleet: Fleet) -> None:
    """Runs last: it stops the module's worker."""
    await asyncio.to_thread(stop, fleet.worker, signal.SIGTERM, 15)
    # the hourly and nightly jobs ran just now; the last drain that refreshed a key finished two hours ago; one key
    # has waited ten minutes, so only the drain's record (not the never-drained fallback, over an hour) can fire it
    async with db.transaction() as session:
        await session.execute(
            text(
                "INSERT INTO job_runs (name, holder, started_at, finished_at) VALUES "
                "('recompute_windows', 'w', now(), now()), ('reconcile', 'w', now(), now()), "
                "('drain', 'w', now() - interval '2 hours', now() - interval '2 hours')"
            )
        )
        await outbox.mark_dirty(session, [KEY], "assimilate", ring=False)
    async with db.transaction() as session:
        await session.execute(
            text("UPDATE infestation_dirty_keys SET first_dirtied_at = now() - interval '10 minutes'")
        )

    expected = {"TarakanRollupPipelineStopped", "TarakanDirtyKeyOld", "TarakanTargetDown"}
    deadline = time.monotonic() + 25  # the web process reads the fleet gauges at most every 5 s
    while not expected <= set(alerts := await active_alerts(fleet)):
        assert time.monotonic() < deadline, f"active alerts: {alerts}"
        await asyncio.sleep(0.2)
    assert set(alerts) == expected, alerts
    stopped = alerts["TarakanRollupPipelineStopped"]
    assert stopped["state"] == "pending" and stopped["labels"]["severity"] == "critical"
    assert stopped["annotations"]["summary"] == "1 pattern keys wait and no drain has refreshed a key for over an hour"
    down = alerts["TarakanTargetDown"]["labels"]
    assert (down["job"], down["instance"]) == ("tarakan-worker", fleet.worker_target)
