"""Forwarded headers count only from the proxies in FORWARDED_ALLOW_IPS; from any other peer they are ignored and
logged once per peer (not per request), with a bounded memory of the peers already named."""

from __future__ import annotations

import logging

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from app.kernel.addresses import ForwardedHeaders, client_group

FORWARDED = {"X-Forwarded-For": "198.51.100.7", "X-Forwarded-Proto": "https"}


async def whoami(request: Request) -> Response:
    assert request.client is not None
    return PlainTextResponse(f"{request.client.host} {request.url.scheme}")


def behind(monkeypatch: pytest.MonkeyPatch, trusted: str) -> ForwardedHeaders:
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", trusted)
    return ForwardedHeaders(Starlette(routes=[Route("/", whoami)]))


async def seen(app: ForwardedHeaders, peer: str, headers: dict[str, str] = FORWARDED) -> str:
    transport = httpx.ASGITransport(app=app, client=(peer, 4711))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        return (await client.get("/", headers=headers)).text


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "tarakan.addresses"]


async def test_a_trusted_proxy_names_the_client_and_raises_no_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    app = behind(monkeypatch, "10.0.0.0/8")
    assert await seen(app, "10.1.2.3") == "198.51.100.7 https"
    assert warnings(caplog) == []


async def test_forwarded_headers_from_an_untrusted_peer_are_ignored_and_logged_once_per_peer(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    app = behind(monkeypatch, "10.0.0.5")
    with caplog.at_level(logging.WARNING, logger="tarakan.addresses"):
        for _ in range(3):
            assert await seen(app, "203.0.113.9") == "203.0.113.9 http"
        assert await seen(app, "203.0.113.10", {"Forwarded": "for=198.51.100.7"}) == "203.0.113.10 http"
        assert await seen(app, "203.0.113.11", {}) == "203.0.113.11 http"  # no forwarded header: nothing to say
    lines = warnings(caplog)
    assert len(lines) == 2, lines
    assert "x-forwarded-for, x-forwarded-proto" in lines[0] and "203.0.113.9" in lines[0]
    assert "FORWARDED_ALLOW_IPS" in lines[0]
    assert "forwarded" in lines[1] and "203.0.113.10" in lines[1]


async def test_the_peers_already_warned_about_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "10.0.0.5")
    app = ForwardedHeaders(_answered)
    for n in range(1100):
        peer = f"198.18.{n // 256}.{n % 256}"
        await app({"type": "http", "client": (peer, 1), "headers": [(b"x-forwarded-for", b"1.2.3.4")]}, _no, _sent)
    assert len(app.warned) == 1024


async def _answered(scope: Scope, receive: Receive, send: Send) -> None:
    return None


async def _no() -> Message:
    return {"type": "http.disconnect"}


async def _sent(message: Message) -> None:
    return None


def test_a_client_group_is_an_ipv4_address_or_an_ipv6_64() -> None:
    assert client_group("2001:db8:0:0:1::5") == client_group("2001:db8::ffff:ffff") == "2001:db8::/64"
    assert client_group("2001:db8:0:1::5") == "2001:db8:0:1::/64"
    assert client_group("::ffff:198.51.100.9") == "198.51.100.9"
    assert client_group("198.51.100.9") == "198.51.100.9"
    assert client_group(None) == "unknown"
    assert client_group("testclient") == "testclient"
