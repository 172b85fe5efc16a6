"""Forge fetches a user triggers are bounded (issue 34, docs/security.md "Forge fetch"): an account's verifications
have a rate of their own (every attempt counts, 503s included, form and API alike), apart from the shared
refused-attempt allowance, and a process has at most forge.USER_FETCHES verifications asking the forge at once
(beyond: a 503 with Retry-After at once, nothing queued). The forge is a loopback server."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from app.maintainers import forge as fetcher
from app.maintainers import service
from app.registry.models import Repository
from tests import factories
from tests.maintainers.statement_support import bearer
from tests.maintainers.support import Answer, Forge
from tests.moderation.support import SAME_ORIGIN, act_as


def claims_url(repo: Repository) -> str:
    return f"/api/v1/repos/{repo.host}/{repo.owner}/{repo.name}/claims"


async def test_every_verify_counts_against_the_accounts_own_rate(
    client: httpx.AsyncClient, forge: Forge, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REFUSED_PER_MINUTE", "3")  # the shared allowance, small: the 503s and 429s must not touch it
    repo = await factories.create_repository()
    account = await factories.create_account()
    headers = await bearer(account)
    made = await client.post(claims_url(repo), headers=headers)
    assert made.status_code == 201, made.text
    claim_id = made.json()["claim"]["id"]
    forge.fail(repo.host, repo.owner, repo.name, status=502)  # the forge is down
    await act_as(client, account)
    api = {**headers, **SAME_ORIGIN}  # the session cookie is in the jar too
    limit = service.VERIFIES.limit
    for attempt in range(limit):
        if attempt % 2:  # the maintain page's form and the API share the account's rate
            answer = await client.post(
                f"/repos/{repo.host}/{repo.owner}/{repo.name}/maintain/verify",
                headers=SAME_ORIGIN,
                data={"claim_id": str(claim_id)},
            )
        else:
            answer = await client.post(f"/api/v1/claims/{claim_id}/verify", headers=api, json={})
        assert answer.status_code == 503 and int(answer.headers["Retry-After"]) > 0, (attempt, answer.text)
    assert len(forge.asked) == limit
    over_api = await client.post(f"/api/v1/claims/{claim_id}/verify", headers=api, json={})
    assert over_api.status_code == 429 and "verifications" in over_api.json()["errors"]["rate_limit"][0]
    assert 0 < int(over_api.headers["Retry-After"]) <= service.VERIFIES.seconds
    over_form = await client.post(
        f"/repos/{repo.host}/{repo.owner}/{repo.name}/maintain/verify",
        headers=SAME_ORIGIN,
        data={"claim_id": str(claim_id)},
    )
    assert over_form.status_code == 429 and "Retry-After" in over_form.headers
    assert len(forge.asked) == limit  # the forge was not asked again
    # the outage locked the account out of nothing else: the refused-attempt allowance is untouched
    await act_as(client, None)
    other = await factories.create_repository()
    assert (await client.post(claims_url(other), headers=headers)).status_code == 201
    # another account has its own rate
    second = await bearer(await factories.create_account())
    theirs = (await client.post(claims_url(repo), headers=second)).json()["claim"]["id"]
    assert (await client.post(f"/api/v1/claims/{theirs}/verify", headers=second, json={})).status_code == 503


async def test_at_most_a_few_verifies_ask_the_forge_at_once(client: httpx.AsyncClient, forge: Forge) -> None:
    repo = await factories.create_repository()
    callers = []
    for _ in range(fetcher.USER_FETCHES + 3):
        headers = await bearer(await factories.create_account())
        claim = (await client.post(claims_url(repo), headers=headers)).json()["claim"]
        callers.append((claim["id"], headers))
    forge.answers[forge.path_of(repo.host, repo.owner, repo.name)] = Answer(200, b"no token here", delay=1.0)

    answers = await asyncio.gather(
        *(client.post(f"/api/v1/claims/{claim_id}/verify", headers=h, json={}) for claim_id, h in callers)
    )
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [422] * fetcher.USER_FETCHES + [503] * 3, [a.text for a in answers]
    busy = [a for a in answers if a.status_code == 503]
    assert all(int(a.headers["Retry-After"]) > 0 and "forge" in a.json()["errors"] for a in busy)
    assert len(forge.asked) == fetcher.USER_FETCHES  # the rest never reached the forge
    # the slots are free again once the fetches end
    claim_id, headers = callers[[a.status_code for a in answers].index(503)]
    assert (await client.post(f"/api/v1/claims/{claim_id}/verify", headers=headers, json={})).status_code == 422
