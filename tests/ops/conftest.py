from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from app.kernel import queue
from app.ops import gauges

SCRAPER = ("10.0.0.9", 4711)  # a scraper on the private network: inside the default METRICS_ALLOW


@pytest.fixture
async def empty_queue() -> None:
    """No arq job left over from another test."""
    redis = await queue.pool()
    await redis.flushdb()


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    """The app as Prometheus on the private network reaches it."""
    from app.main import app

    transport = httpx.ASGITransport(app=app, client=SCRAPER)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        yield c


@pytest.fixture(autouse=True)
def fresh_gauges() -> None:
    """Each test's first scrape reads the database (the readings are kept 5 s per process)."""
    gauges.forget_readings()
