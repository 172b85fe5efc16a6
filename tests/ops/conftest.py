from __future__ import annotations

import pytest

from jobs import queue


@pytest.fixture
async def empty_queue() -> None:
    """No arq job left over from another test."""
    redis = await queue.pool()
    await redis.flushdb()
