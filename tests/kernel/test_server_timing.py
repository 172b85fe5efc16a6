"""Every response says how long the server took (Server-Timing), so server time can be told from network time."""

from __future__ import annotations

import httpx


async def test_pages_and_errors_carry_server_timing(client: httpx.AsyncClient) -> None:
    for path in ("/", "/infestations", "/healthz", "/no/such/page"):
        response = await client.get(path)
        name, _, duration = response.headers["server-timing"].partition(";dur=")
        assert name == "app" and float(duration) >= 0, path
