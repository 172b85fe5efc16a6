"""What the tests of public pages as the render cache keeps them share (app.record.rendered): the process's cache
and its counters, a pattern's show page kept, a change behind the cache's back, and pages' bodies."""

from __future__ import annotations

from collections.abc import Iterable

import httpx
from sqlalchemy import text

from app.kernel import db
from app.kernel.metrics import RENDER_CACHE_REQUESTS
from app.record import rendered
from e2e.seed import SeededPattern, seed_pattern


def store() -> rendered.RenderCache:
    cache = rendered.cache()
    assert cache is not None
    return cache


def requests(outcome: str) -> float:
    value: float = RENDER_CACHE_REQUESTS.labels(outcome=outcome)._value.get()
    return value


async def kept_show_page(client: httpx.AsyncClient, title: str) -> tuple[SeededPattern, str, httpx.Response]:
    """A new pattern `title` in two repositories, and its show page as an anonymous visitor first gets it (so kept):
    the pattern, the page's path and that answer."""
    seeded = await seed_pattern(title, repos=2)
    path = f"/infestations/{seeded.key}"
    first = await client.get(path)
    assert first.status_code == 200 and title in first.text
    return seeded, path, first


async def retitle_behind_the_cache(key: str, title: str) -> None:
    """Change what the show page reads without moving any part of the version (no audit, feed, report or refresh)."""
    async with db.transaction() as session:
        await session.execute(
            text("UPDATE infestation_patterns SET title = :t WHERE pattern_key = :k"), {"t": title, "k": key}
        )


async def bodies(client: httpx.AsyncClient, paths: Iterable[str]) -> dict[str, str]:
    """Each page as an anonymous visitor gets it, each a 200: its body."""
    found = {}
    for path in paths:
        answer = await client.get(path)
        assert answer.status_code == 200, (path, answer.status_code, answer.text[:500])
        found[path] = answer.text
    return found
