"""/metrics: Prometheus text with every rollup metric, the backlog gauges read from the database at scrape time."""

from __future__ import annotations

import httpx
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from app.infestations import dirty_queue
from app.kernel import db
from app.ops import gauges
from app.record import outbox
from app.reports.finding_memory import pattern_key
from tests import factories
from tests.sql import execute

METRIC_NAMES = {
    "tarakan_infestations_list_seconds",
    "tarakan_infestations_refresh_seconds",
    "tarakan_infestations_refresh_instances",
    "tarakan_infestations_refresh_errors",
    "tarakan_infestations_reconcile_keys",
    "tarakan_infestations_shadow_mismatches",
    "tarakan_infestations_dirty_backlog",
    "tarakan_infestations_dirty_oldest_age_seconds",
    "tarakan_infestations_oldest_refreshed_age_seconds",
    "tarakan_infestations_newest_refreshed_age_seconds",
    "tarakan_infestations_drained_keys",
    "tarakan_infestations_hot_keys_throttled",
    "tarakan_http_requests",
    "tarakan_http_request_duration_seconds",
}
GAUGES = (
    "tarakan_infestations_dirty_backlog",
    "tarakan_infestations_dirty_oldest_age_seconds",
    "tarakan_infestations_oldest_refreshed_age_seconds",
    "tarakan_infestations_newest_refreshed_age_seconds",
)


async def scrape(client: httpx.AsyncClient) -> dict[str, float]:
    gauges.forget_readings()  # a fresh reading each time (the 5 s interval: tests/ops/test_metrics_access.py)
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    assert set(families) >= METRIC_NAMES
    return {name: families[name].samples[0].value for name in GAUGES}


async def test_metrics_exposes_every_rollup_metric_and_live_gauges(client: httpx.AsyncClient) -> None:
    assert await scrape(client) == dict.fromkeys(GAUGES, 0.0)

    author = await factories.create_account()
    for _ in range(2):
        await factories.create_instance(await factories.create_repository(), author, "Open redirect in login")
    await factories.create_instance(await factories.create_repository(), author, "Weak session secret")
    async with db.transaction() as session:
        await outbox.mark_dirty(
            session, [pattern_key("Open redirect in login"), pattern_key("Weak session secret")], "assimilate"
        )
        await session.execute(text("UPDATE infestation_dirty_keys SET first_dirtied_at = now() - interval '2 minutes'"))
    waiting = await scrape(client)
    assert waiting["tarakan_infestations_dirty_backlog"] == 2
    assert 120 <= waiting["tarakan_infestations_dirty_oldest_age_seconds"] < 180

    await dirty_queue.drain_all()
    async with db.transaction() as session:
        await session.execute(text("UPDATE infestation_patterns SET refreshed_at = now() - interval '2 hours'"))
    await f_pattern_refreshed_minutes_ago(10)
    drained = await scrape(client)
    assert drained["tarakan_infestations_dirty_backlog"] == 0
    assert drained["tarakan_infestations_dirty_oldest_age_seconds"] == 0
    assert 7200 <= drained["tarakan_infestations_oldest_refreshed_age_seconds"] < 7300
    # the newest refresh is the pipeline's heartbeat: max(refreshed_at), not min
    assert 600 <= drained["tarakan_infestations_newest_refreshed_age_seconds"] < 700


async def f_pattern_refreshed_minutes_ago(minutes: int) -> None:
    await execute(
        "UPDATE infestation_patterns SET refreshed_at = now() - make_interval(mins => :m) "
        "WHERE pattern_key = (SELECT min(pattern_key) FROM infestation_patterns)",
        m=minutes,
    )


async def test_last_successful_fleet_jobs_are_unix_timestamps_from_job_runs(client: httpx.AsyncClient) -> None:
    async with db.transaction() as session:
        await session.execute(
            text(
                "INSERT INTO job_runs (name, holder, started_at, finished_at) VALUES "
                "('recompute_windows', 'w', now(), TIMESTAMPTZ '2026-01-02 03:04:05+00'), "
                "('reconcile', 'w', now(), NULL)"  # running for the first time: nothing finished yet
            )
        )
    response = await client.get("/metrics")
    [family] = [
        f
        for f in text_string_to_metric_families(response.text)
        if f.name == "tarakan_job_last_success_timestamp_seconds"
    ]
    values = {s.labels["fleet_job"]: s.value for s in family.samples}
    assert values["recompute_windows"] == 1767323045.0
    assert "reconcile" not in values or values["reconcile"] > 0  # an earlier test's value, never the unfinished run


async def test_requests_are_counted_by_route_template_method_and_status_class(client: httpx.AsyncClient) -> None:
    def requests(route: str, status: str) -> float:
        return (
            REGISTRY.get_sample_value(
                "tarakan_http_requests_total", {"route": route, "method": "GET", "status": status}
            )
            or 0.0
        )

    def timed(route: str) -> float:
        return (
            REGISTRY.get_sample_value("tarakan_http_request_duration_seconds_count", {"route": route, "method": "GET"})
            or 0.0
        )

    show = "/infestations/{pattern_key}{format}"
    before = (requests(show, "4xx"), timed(show), requests("unmatched", "4xx"))
    for key in ("a" * 64, "b" * 64, "c" * 64):  # three raw paths, one template
        assert (await client.get(f"/infestations/{key}")).status_code == 404
    for path in ("/no/such/page", "/another-unknown-path"):
        assert (await client.get(path)).status_code == 404
    assert requests(show, "4xx") == before[0] + 3
    assert timed(show) == before[1] + 3
    assert requests("unmatched", "4xx") == before[2] + 2
    assert (await client.get("/healthz")).status_code == 200
    assert requests("/healthz", "2xx") >= 1
    labels = {s.labels["route"] for f in REGISTRY.collect() if f.name == "tarakan_http_requests" for s in f.samples}
    assert not any(key in route for route in labels for key in ("aaaa", "/no/such"))


async def test_a_request_id_is_accepted_from_and_returned_in_x_request_id(client: httpx.AsyncClient) -> None:
    given = await client.get("/healthz", headers={"X-Request-ID": "lb-7f3a.42"})
    assert given.headers["X-Request-ID"] == "lb-7f3a.42"
    minted = await client.get("/healthz")
    other = await client.get("/healthz", headers={"X-Request-ID": "no spaces or <tags> allowed"})
    assert len(minted.headers["X-Request-ID"]) == 32 and minted.headers["X-Request-ID"] != other.headers["X-Request-ID"]
    assert " " not in other.headers["X-Request-ID"]


async def test_health_endpoints_still_answer(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).text == "ok"
    ready = await client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["checks"] == {"database": "ok", "schema": "ok", "redis": "ok"}
