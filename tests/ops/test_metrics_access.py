"""/metrics on web and worker answers only the addresses in METRICS_ALLOW (default loopback and the private ranges;
others get the 404 of an unknown path), and its database gauges are read at most every 5 s per process."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from app.devservices import free_port
from app.kernel import db
from app.kernel.metrics import start_metrics_server
from app.ops import gauges


def from_address(host: str) -> httpx.AsyncClient:
    from app.main import app

    transport = httpx.ASGITransport(app=app, client=(host, 4711))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


async def status_from(host: str) -> int:
    async with from_address(host) as client:
        return (await client.get("/metrics")).status_code


async def test_metrics_answer_loopback_and_private_addresses_and_hide_from_others() -> None:
    for host in ("127.0.0.1", "::1", "::ffff:127.0.0.1", "10.1.2.3", "172.20.0.4", "192.168.1.5", "fd00::7"):
        assert await status_from(host) == 200, host
    for host in ("203.0.113.7", "2001:db8::1", "::ffff:203.0.113.7", "172.32.0.1", "testclient"):
        assert await status_from(host) == 404, host
    async with from_address("203.0.113.7") as client:
        hidden, unknown = await client.get("/metrics"), await client.get("/no-such-page")
    # the normal error path: the very page of an unknown address, nothing about metrics
    assert hidden.headers["content-type"] == unknown.headers["content-type"]
    assert "tarakan_" not in hidden.text and "Nothing is published at this address." in hidden.text


async def test_metrics_allow_names_the_networks_that_may_scrape(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("METRICS_ALLOW", "203.0.113.0/24, 2001:db8::/32")
    assert await status_from("203.0.113.7") == 200
    assert await status_from("2001:db8::1") == 200
    assert await status_from("127.0.0.1") == 404  # the list replaces the default


async def test_the_workers_metrics_port_answers_only_metrics_allow(monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    server = start_metrics_server(port, "127.0.0.1")
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        allowed = await asyncio.to_thread(httpx.get, url)
        assert allowed.status_code == 200 and "tarakan_" in allowed.text
        monkeypatch.setenv("METRICS_ALLOW", "10.0.0.0/8")
        refused = await asyncio.to_thread(httpx.get, url)
        assert refused.status_code == 404 and "tarakan_" not in refused.text
    finally:
        server.shutdown()
        server.server_close()


def backlog(body: str) -> float:
    [family] = [f for f in text_string_to_metric_families(body) if f.name == "tarakan_infestations_dirty_backlog"]
    return family.samples[0].value


async def add_dirty_key(n: int) -> None:
    async with db.transaction() as session:
        await session.execute(
            text("INSERT INTO infestation_dirty_keys (pattern_key, reason) VALUES (:k, 'assimilate')"),
            {"k": f"{n:064x}"},
        )


async def test_scrapes_read_the_database_gauges_at_most_every_five_seconds(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await add_dirty_key(1)
    assert backlog((await client.get("/metrics")).text) == 1
    await add_dirty_key(2)
    for _ in range(5):  # within the interval: the reading of the first scrape, no query
        assert backlog((await client.get("/metrics")).text) == 1
    monkeypatch.setattr(gauges, "_read_at", gauges._read_at - 5.01)  # type: ignore[operator]
    assert backlog((await client.get("/metrics")).text) == 2
