"""With SERVER_TIMING=1 every response says how long the server took (Server-Timing), so server time can be told
from network time; without it no response does (a timing oracle for anyone)."""

from __future__ import annotations

import httpx
import pytest

PATHS = ("/", "/infestations", "/healthz", "/no/such/page")


async def test_pages_and_errors_carry_server_timing_when_the_server_is_told_to(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVER_TIMING", "1")
    for path in PATHS:
        response = await client.get(path)
        name, _, duration = response.headers["server-timing"].partition(";dur=")
        assert name == "app" and float(duration) >= 0, path


async def test_no_response_carries_server_timing_by_default(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SERVER_TIMING", raising=False)
    for path in PATHS:
        assert "server-timing" not in (await client.get(path)).headers, path
