"""A session cookie that names no live session (garbage, logged out, expired) is an anonymous visitor's: the render
cache answers it from memory (app.record.rendered, judged by app.accounts.sessions), and its lookup is remembered
per process, so a garbage cookie costs neither a rendering nor a sessions query a request. A live session still
gets its own page, read now."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import event

from app.accounts.sessions import COOKIE_NAME, logout, open_session
from app.kernel import db
from app.kernel.metrics import RENDER_CACHE_REQUESTS
from app.record import rendered
from e2e.seed import seed_pattern
from tests import factories
from tests.site.test_render_cache import retitle_behind_the_cache


def requests(outcome: str) -> float:
    value: float = RENDER_CACHE_REQUESTS.labels(outcome=outcome)._value.get()
    return value


async def test_a_cookie_naming_no_live_session_gets_the_cached_anonymous_page(
    client: httpx.AsyncClient,
) -> None:
    seeded = await seed_pattern("Kept title", repos=2)
    path = f"/infestations/{seeded.key}"
    first = await client.get(path)
    assert first.status_code == 200 and "Kept title" in first.text
    etag = first.headers["ETag"]
    store = rendered.cache()
    assert store is not None
    await retitle_behind_the_cache(seeded.key, "Read now")  # what a page rendered now would say

    sent: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "web_sessions" in statement:
            sent.append(statement)

    engine = db.engine().sync_engine
    event.listen(engine, "before_cursor_execute", seen)
    try:
        hits, renders, bypassed = store.hits, store.renders, requests("bypass")
        client.cookies.set(COOKIE_NAME, "garbage-not-a-session")
        for _ in range(3):
            answer = await client.get(path)
            assert answer.status_code == 200 and "Kept title" in answer.text, "served from memory as anonymous"
            assert answer.headers["ETag"] == etag
        assert (await client.get(path, headers={"If-None-Match": etag})).status_code == 304
        assert (store.hits, store.renders, requests("bypass")) == (hits + 4, renders, bypassed)
        assert len(sent) == 1, "the dead token was looked up once, then remembered"

        member = await factories.create_account()
        token = await open_session(member.id)
        client.cookies.set(COOKIE_NAME, token)
        own = await client.get(path)
        assert own.status_code == 200 and "Read now" in own.text, "a live session gets its own page, read now"
        assert requests("bypass") == bypassed + 1 and store.hits == hits + 4

        assert await logout(token)  # the same cookie, copied after the logout: dead, anonymous again
        assert "Kept title" in (await client.get(path)).text
        assert store.hits == hits + 5
    finally:
        event.remove(engine, "before_cursor_execute", seen)
