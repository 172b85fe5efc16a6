"""/metrics: Prometheus text with every rollup metric, the backlog gauges read from the database at scrape time."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from app.infestations import dirty_queue
from app.kernel import db, outbox
from app.reports.finding_memory import pattern_key
from tests import factories

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
}
GAUGES = (
    "tarakan_infestations_dirty_backlog",
    "tarakan_infestations_dirty_oldest_age_seconds",
    "tarakan_infestations_oldest_refreshed_age_seconds",
)


async def scrape(client: httpx.AsyncClient) -> dict[str, float]:
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
    async with db.transaction() as session:
        await outbox.mark_dirty(
            session, [pattern_key("Open redirect in login"), pattern_key("Never seen")], "assimilate"
        )
        await session.execute(text("UPDATE infestation_dirty_keys SET first_dirtied_at = now() - interval '2 minutes'"))
    waiting = await scrape(client)
    assert waiting["tarakan_infestations_dirty_backlog"] == 2
    assert 120 <= waiting["tarakan_infestations_dirty_oldest_age_seconds"] < 180

    await dirty_queue.drain_all()
    async with db.transaction() as session:
        await session.execute(text("UPDATE infestation_patterns SET refreshed_at = now() - interval '2 hours'"))
    drained = await scrape(client)
    assert drained["tarakan_infestations_dirty_backlog"] == 0
    assert drained["tarakan_infestations_dirty_oldest_age_seconds"] == 0
    assert 7200 <= drained["tarakan_infestations_oldest_refreshed_age_seconds"] < 7300


async def test_health_endpoints_still_answer(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).text == "ok"
    ready = await client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["checks"] == {"database": "ok", "redis": "ok"}
