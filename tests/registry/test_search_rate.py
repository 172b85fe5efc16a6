"""Search answers at most SEARCH_RATE_PER_MINUTE requests a minute per client address (an IPv4 address, or an IPv6
/64; `::ffff:a.b.c.d` is a.b.c.d), then 429 with Retry-After in the route's format, never kept by a shared cache."""

from __future__ import annotations

import asyncio
import itertools
import time

import httpx
import pytest

from app.kernel.config import search_rate_per_minute

RATE = 3
_hosts = itertools.count(1)


def from_address(host: str) -> httpx.AsyncClient:
    from app.main import app

    transport = httpx.ASGITransport(app=app, client=(host, 4711))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


async def statuses(host: str, n: int, path: str = "/search.json?q=acme") -> list[int]:
    async with from_address(host) as client:
        return [(await client.get(path)).status_code for _ in range(n)]


@pytest.fixture(autouse=True)
async def low_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEARCH_RATE_PER_MINUTE", str(RATE))
    if 60 - time.time() % 60 < 2:  # the counters are per clock minute: start well inside one
        await asyncio.sleep(60 - time.time() % 60 + 0.05)


def fresh_ipv4() -> str:
    return f"198.51.100.{next(_hosts)}"


async def test_a_search_past_the_rate_answers_429_with_retry_after_in_its_format() -> None:
    host = fresh_ipv4()
    assert await statuses(host, RATE) == [200] * RATE
    async with from_address(host) as client:
        twin, page = await client.get("/search.json?q=acme"), await client.get("/search?q=acme")
    assert twin.status_code == page.status_code == 429
    assert twin.json() == {"errors": {"rate_limit": [f"at most {RATE} searches a minute from one address"]}}
    assert "text/html" in page.headers["content-type"] and "Too many attempts" in page.text
    for response in (twin, page):
        assert 1 <= int(response.headers["retry-after"]) <= 60
        assert response.headers["cache-control"] == "no-store"
    assert await statuses(fresh_ipv4(), 1) == [200]  # another address has its own allowance


async def test_an_ipv6_64_shares_one_allowance_and_a_mapped_ipv4_is_its_ipv4() -> None:
    prefix = f"2001:db8:{next(_hosts):x}:1"
    assert await statuses(f"{prefix}::1", RATE) == [200] * RATE
    assert await statuses(f"{prefix}:ffff:ffff:ffff:ffff", 1) == [429]  # same /64
    assert await statuses(f"2001:db8:{next(_hosts):x}:2::1", 1) == [200]  # another /64
    v4 = fresh_ipv4()
    assert await statuses(v4, RATE) == [200] * RATE
    assert await statuses(f"::ffff:{v4}", 1) == [429]


async def test_the_rate_is_120_a_minute_by_default_and_zero_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEARCH_RATE_PER_MINUTE")
    assert search_rate_per_minute() == 120
    monkeypatch.setenv("SEARCH_RATE_PER_MINUTE", "0")
    assert await statuses(fresh_ipv4(), RATE + 2) == [200] * (RATE + 2)
