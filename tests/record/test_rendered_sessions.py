"""A session cookie that names no live session (garbage, logged out, expired) is an anonymous visitor's: the render
cache answers it from memory (app.record.rendered, judged by app.accounts.sessions), and its lookup is remembered
per process, so a garbage cookie costs neither a rendering nor a sessions query a request. A live session still
gets its own page, read now."""

from __future__ import annotations

import httpx

from app.accounts.sessions import COOKIE_NAME, logout, open_session
from tests import factories
from tests.record.support import kept_show_page, requests, retitle_behind_the_cache, store
from tests.statements import statements_sent


async def test_a_cookie_naming_no_live_session_gets_the_cached_anonymous_page(
    client: httpx.AsyncClient,
) -> None:
    seeded, path, first = await kept_show_page(client, "Kept title")
    etag = first.headers["ETag"]
    cache = store()
    await retitle_behind_the_cache(seeded.key, "Read now")  # what a page rendered now would say

    hits, renders, bypassed = cache.hits, cache.renders, requests("bypass")
    client.cookies.set(COOKIE_NAME, "garbage-not-a-session")
    with statements_sent() as sent:
        for _ in range(3):
            answer = await client.get(path)
            assert answer.status_code == 200 and "Kept title" in answer.text, "served from memory as anonymous"
            assert answer.headers["ETag"] == etag
        assert (await client.get(path, headers={"If-None-Match": etag})).status_code == 304
    assert (cache.hits, cache.renders, requests("bypass")) == (hits + 4, renders, bypassed)
    lookups = [statement for statement in sent if "web_sessions" in statement]
    assert len(lookups) == 1, "the dead token was looked up once, then remembered"

    member = await factories.create_account()
    token = await open_session(member.id)
    client.cookies.set(COOKIE_NAME, token)
    own = await client.get(path)
    assert own.status_code == 200 and "Read now" in own.text, "a live session gets its own page, read now"
    assert requests("bypass") == bypassed + 1 and cache.hits == hits + 4

    assert await logout(token)  # the same cookie, copied after the logout: dead, anonymous again
    assert "Kept title" in (await client.get(path)).text
    assert cache.hits == hits + 5
