"""Behind a trusted proxy (a real `tarakan serve` with FORWARDED_ALLOW_IPS naming it), each client is itself: two
clients are limited separately by the per-address login limit, a public client does not reach /metrics through a
proxy on loopback, and forwarded headers from a peer that is not trusted are ignored and logged once for that peer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest

from app.accounts.service import PASSWORD_MAX
from app.accounts.sessions import MAX_FAILURES_PER_ADDRESS
from tests.harness import start_server, stop
from tests.moderation.support import make_account

PROXY = "127.0.0.1"  # the trusted proxy: the harness's clients connect from it
STRANGER = "127.0.0.2"  # another peer on loopback, not in FORWARDED_ALLOW_IPS


class Server(NamedTuple):
    base: str
    log: Path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("proxy") / "serve.log"
    proc, base = start_server({"FORWARDED_ALLOW_IPS": PROXY}, log=log)
    try:
        yield Server(base, log)
    finally:
        stop(proc)


def via(server: Server, peer: str = PROXY, client_ip: str | None = None) -> httpx.AsyncClient:
    """A client connecting from `peer`; with `client_ip`, as a proxy forwarding that client."""
    headers = {"Origin": server.base}
    if client_ip is not None:
        headers |= {"X-Forwarded-For": client_ip, "X-Forwarded-Proto": "http"}
    transport = httpx.AsyncHTTPTransport(local_address=peer)
    return httpx.AsyncClient(transport=transport, base_url=server.base, headers=headers, timeout=30)


async def wrong_password(client: httpx.AsyncClient, n: int) -> int:
    # longer than any password can be: the wrong-password answer, counted against the address, without hashing
    data = {"email": f"guess{n}@example.com", "password": "x" * (PASSWORD_MAX + 1)}
    return (await client.post("/login", data=data)).status_code


async def test_two_clients_behind_a_trusted_proxy_are_limited_separately(server: Server) -> None:
    await make_account("member", password="correct horse battery staple")
    async with via(server, client_ip="198.51.100.1") as a, via(server, client_ip="198.51.100.2") as b:
        for n in range(MAX_FAILURES_PER_ADDRESS):
            assert await wrong_password(a, n) == 401, n
        # client A's 21st failure (an email it already failed on) is refused
        refused = await a.post("/login", data={"email": "guess0@example.com", "password": "wrong"})
        assert refused.status_code == 429 and "retry-after" in refused.headers
        # client B, behind the same proxy, is answered normally: the wrong-password answer, not a 429
        answered = await b.post("/login", data={"email": "member@example.com", "password": "wrong"})
        assert answered.status_code == 401, answered.text[:300]


async def test_a_public_client_forwarded_by_a_proxy_on_loopback_does_not_reach_metrics(server: Server) -> None:
    async with via(server, client_ip="203.0.113.9") as public, via(server) as scraper:
        assert (await public.get("/metrics")).status_code == 404
        assert (await scraper.get("/metrics")).status_code == 200


async def test_forwarded_headers_from_an_untrusted_peer_are_ignored_and_logged_once(server: Server) -> None:
    async with via(server, peer=STRANGER, client_ip="203.0.113.9") as stranger:
        for _ in range(3):
            # its X-Forwarded-For is ignored: it is itself, a loopback address, which METRICS_ALLOW lets in
            assert (await stranger.get("/metrics")).status_code == 200
    deadline = time.monotonic() + 5
    while True:
        lines = [line for line in server.log.read_text().splitlines() if "FORWARDED_ALLOW_IPS" in line]
        if lines or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert len(lines) == 1, lines
    assert f"from {STRANGER}," in lines[0] and "WARNING" in lines[0]
    assert not any(f"from {PROXY}," in line for line in server.log.read_text().splitlines())
