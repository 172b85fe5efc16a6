"""Who may register repositories and how often (docs/security.md): an acting account, a daily quota of new
repositories (moderators and admins exempt), 404 for repositories the account may not see, and the registry
stats dropped at most once per TTL under a registration burst."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator

import httpx
import pytest
from sqlalchemy import func, select

from app.accounts.models import Account
from app.accounts.service import create_token
from app.kernel import db
from app.kernel.errors import RateLimited
from app.kernel.quotas import DailyQuota
from app.registry import service, stats
from app.registry.models import Repository
from app.registry.service import register_repository
from app.registry.stats import registry_stats, reset_registry_stats_cache
from tests import factories


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    reset_registry_stats_cache()
    yield
    reset_registry_stats_cache()


async def repository_count() -> int:
    async with db.read_session(replica=False) as session:
        return int((await session.execute(select(func.count()).select_from(Repository))).scalar_one())


async def bearer(account: Account) -> dict[str, str]:
    return {"Authorization": f"Bearer {await create_token(account.id, ['repositories:write'])}"}


async def register(client: httpx.AsyncClient, headers: dict[str, str], owner: str, name: str) -> httpx.Response:
    body = json.dumps({"host": "github.com", "owner": owner, "name": name})
    return await client.post(
        "/api/v1/repositories", content=body, headers={**headers, "Content-Type": "application/json"}
    )


async def test_a_restricted_account_cannot_register_and_writes_nothing(client: httpx.AsyncClient) -> None:
    restricted = await factories.create_account(state="restricted")
    response = await register(client, await bearer(restricted), "acme", "widget")
    assert response.status_code == 403
    assert response.json() == {"errors": {"account": ["is restricted and cannot act"]}}
    assert await repository_count() == 0


async def test_a_quarantined_repository_answers_404_to_registration(client: httpx.AsyncClient) -> None:
    hidden = await factories.create_repository("acme", "hidden", listing_status="quarantined")
    member = await factories.create_account()
    response = await register(client, await bearer(member), "acme", "hidden")
    assert response.status_code == 404
    assert response.json() == {"errors": {"repository": ["not found"]}}
    # a reviewer may read quarantined records, so it gets the record as before
    reviewer = await factories.create_account(trust_tier="reviewer")
    seen = await register(client, await bearer(reviewer), "acme", "hidden")
    assert seen.status_code == 200 and seen.json()["id"] == hidden.id
    assert await repository_count() == 1


async def test_the_daily_registration_quota_is_a_429_with_retry_after(client: httpx.AsyncClient) -> None:
    newcomer = await factories.create_account(state="probation")
    headers = await bearer(newcomer)
    quota = service.REGISTRATIONS_PER_DAY.other
    for i in range(quota):
        assert (await register(client, headers, "acme", f"repo{i}")).status_code == 201
    refused = await register(client, headers, "acme", "one-too-many")
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "86400"
    assert refused.json() == {"errors": {"rate_limit": [f"daily quota of {quota} repository registrations reached"]}}
    # an already registered repository is not a new one: still answered
    assert (await register(client, headers, "acme", "repo0")).status_code == 200
    assert await repository_count() == quota


async def test_moderators_and_admins_are_exempt_from_the_registration_quota(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service, "REGISTRATIONS_PER_DAY", DailyQuota("repository registrations", 1, 1, 1))
    for role in ("moderator", "admin"):
        headers = await bearer(await factories.create_account(platform_role=role))
        for i in range(3):
            assert (await register(client, headers, role, f"repo{i}")).status_code == 201
    member = await bearer(await factories.create_account())
    assert (await register(client, member, "member", "repo0")).status_code == 201
    assert (await register(client, member, "member", "repo1")).status_code == 429


async def test_concurrent_registrations_by_one_account_stay_within_its_quota() -> None:
    newcomer = await factories.create_account(state="probation")
    quota = service.REGISTRATIONS_PER_DAY.other
    results = await asyncio.gather(
        *(register_repository("github.com", "acme", f"race{i}", submitted_by_id=newcomer.id) for i in range(8)),
        return_exceptions=True,
    )
    assert sum(isinstance(r, tuple) for r in results) == quota
    assert sum(isinstance(r, RateLimited) for r in results) == 8 - quota
    assert await repository_count() == quota


class CountingQuery:
    def __init__(self, real: Callable[[], Awaitable[dict[str, int]]]) -> None:
        self.real = real
        self.calls = 0
        self.found: list[int] = []  # the repositories each finished recount saw

    async def __call__(self) -> dict[str, int]:
        self.calls += 1
        result = await self.real()
        self.found.append(result["repositories"])
        return result


async def settles_at(repositories: int) -> bool:
    """The cached count reaches `repositories` once the recount running behind the callers is done."""
    for _ in range(200):
        if (await registry_stats())["repositories"] == repositories:
            return True
        await asyncio.sleep(0.01)
    return False


async def test_a_registration_burst_recounts_the_stats_at_most_once_per_ttl_and_never_makes_a_caller_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REGISTRY_STATS_TTL", "2")
    counting = CountingQuery(stats.query_registry_stats)
    monkeypatch.setattr(stats, "query_registry_stats", counting)
    assert (await registry_stats())["repositories"] == 0
    served = []
    for i in range(10):
        await register_repository("github.com", "burst", f"repo{i}")
        served.append((await registry_stats())["repositories"])  # a home page between registrations
        assert counting.calls <= 2  # no recount per registration
    # the first registration aged the value out and one recount ran behind a caller (it saw the registrations that
    # had committed when its query ran, some of the burst); every home page got the old value or that one at once
    for _ in range(200):
        if len(counting.found) == 2:
            break
        await asyncio.sleep(0.01)
    assert counting.calls == 2 and len(counting.found) == 2  # the first fill, and one recount for the whole burst
    recounted = counting.found[1]
    assert 1 <= recounted <= 10 and set(served) <= {0, recounted}
    assert await settles_at(recounted)
    await asyncio.sleep(2.1)
    assert (await registry_stats())["repositories"] == recounted  # aged out: served at once, recounted behind
    assert await settles_at(10)
    await register_repository("github.com", "burst", "after-the-ttl")  # a new TTL: aged out again at once
    assert await settles_at(11)
    assert counting.calls == 4
