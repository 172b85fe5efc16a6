"""Search answers are cached single-flight by their normalized parameters, one entry for signed-in and anonymous
visitors alike, a takedown is seen at the next request, and a search past the server's statement timeout is load
shedding (503 with Retry-After), not a 500 or a hang (docs/security.md "Limits")."""

from __future__ import annotations

import asyncio
import os

import httpx
import psycopg
import pytest

from app.accounts.sessions import COOKIE_NAME
from app.moderation import service
from app.record.takedowns import TakedownKeyedCache
from app.registry import queries
from tests import factories
from tests.moderation.support import act_as
from tests.sql import get_while_locked

NOTES = "Quarantined while its history is checked."


def names(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text[:200]
    return sorted(item["name"] for item in response.json()["items"])


async def two_repositories() -> None:
    await factories.create_repository(owner="acme", name="widget")
    await factories.create_repository(owner="acme", name="gadget")


async def test_identical_anonymous_searches_run_the_query_once_per_ttl(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await two_repositories()
    # the same normalized query and limit (case, spacing, a limit past the maximum) share one cache entry
    for url in ("/search.json?q=acme", "/search.json?q=ACME", "/search.json?q=%20acme%20", "/search.json?q=acme"):
        assert names(await client.get(url)) == ["gadget", "widget"]
    assert queries.search_cache.cache.loads == 1
    answers = await asyncio.gather(*(client.get("/search.json?q=widget") for _ in range(8)))
    assert all(names(a) == ["widget"] for a in answers)
    assert queries.search_cache.cache.loads == 2  # eight concurrent identical requests, one query
    assert (await client.get("/search?q=widget")).status_code == 200  # the page shares the twin's entry
    assert queries.search_cache.cache.loads == 2

    monkeypatch.setattr(queries, "SEARCH_CACHE_SECONDS", 0.2)
    await client.get("/search.json?q=acme")
    await asyncio.sleep(0.3)
    assert names(await client.get("/search.json?q=acme")) == ["gadget", "widget"]  # aged out: served at once
    for _ in range(100):  # refreshed behind the callers
        if queries.search_cache.cache.loads == 4:
            break
        await asyncio.sleep(0.01)
    assert queries.search_cache.cache.loads == 4  # once on the new TTL, once after it expired
    # counted as it starts: let its read finish, or the next test's TRUNCATE (blocking the loop) waits on it forever
    await asyncio.gather(*queries.search_cache.cache._background.values())


async def test_a_quarantine_is_reflected_at_the_next_identical_search(client: httpx.AsyncClient) -> None:
    await two_repositories()
    moderator = await factories.create_account(platform_role="moderator")
    assert names(await client.get("/search.json?q=acme")) == ["gadget", "widget"]
    await service.change_repository_listing(moderator, "github.com", "acme", "widget", "quarantined", "malware", NOTES)
    assert names(await client.get("/search.json?q=acme")) == ["gadget"]  # well within the TTL
    assert queries.search_cache.cache.loads == 2


async def test_a_takedown_audited_by_another_process_drops_the_cached_answer(client: httpx.AsyncClient) -> None:
    await two_repositories()
    assert names(await client.get("/search.json?q=acme")) == ["gadget", "widget"]
    # another process: its own connection, its own transaction, the rule's audit event with it
    url = os.environ["DATABASE_URL"].replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE repositories SET listing_status = 'quarantined' WHERE name = 'gadget'")
        conn.execute(
            "INSERT INTO audit_events (action, subject_type, subject_id) "
            "VALUES ('repository.listing', 'repository', 'github.com/acme/gadget')"
        )
    assert names(await client.get("/search.json?q=acme")) == ["widget"]


async def test_signed_in_and_anonymous_visitors_share_one_search_cache_entry(client: httpx.AsyncClient) -> None:
    await two_repositories()
    await act_as(client, await factories.create_account(platform_role="moderator"))
    for _ in range(3):
        assert names(await client.get("/search.json?q=acme")) == ["gadget", "widget"]
    assert queries.search_cache.cache.loads == 1  # a privileged view of search lists nothing more
    await act_as(client, None)
    assert names(await client.get("/search.json?q=acme")) == ["gadget", "widget"]
    # a repository listed since (no takedown: the entry stays) shows that the next answers come from the cache
    await factories.create_repository(owner="acme", name="gizmo")
    client.cookies.set(COOKIE_NAME, "garbage")  # any cookie value used to skip the cache: one query per request
    for _ in range(3):
        assert names(await client.get("/search.json?q=acme")) == ["gadget", "widget"]
    assert queries.search_cache.cache.loads == 1


@pytest.mark.parametrize("path", ["/search.json?q=acme", "/search?q=acme"])
async def test_a_search_past_the_statement_timeout_answers_503_with_retry_after(
    client: httpx.AsyncClient, tiny_statement_timeout: None, path: str
) -> None:
    await two_repositories()
    # another connection holds the table: the search waits until its statement is cancelled
    response, waited = await get_while_locked(client, path, "repositories")
    assert response.status_code == 503, response.text[:200]
    assert response.headers["retry-after"] == "10"
    assert waited < 5
    assert names(await client.get("/search.json?q=acme")) == ["gadget", "widget"]  # nothing failed was cached


async def test_the_cache_holds_at_most_its_size_whatever_the_number_of_distinct_queries() -> None:
    cache: TakedownKeyedCache[str] = TakedownKeyedCache(lambda: 60.0, maxsize=4)
    for n in range(50):
        assert await cache.get(f"query {n}", lambda n=n: _value(n)) == f"answer {n}"  # type: ignore[misc]
    assert cache.cache.loads == 50
    assert max(len(cache.cache._fresh), len(cache.cache._last), len(cache.cache._locks)) <= 4
    assert await cache.get("query 49", lambda: _value(-1)) == "answer 49"  # the newest stay
    assert await cache.get("query 0", lambda: _value(0)) == "answer 0"
    assert cache.cache.loads == 51  # the oldest were dropped, so it was loaded again


async def _value(n: int) -> str:
    return f"answer {n}"
