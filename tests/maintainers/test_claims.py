"""Claims proved by the forge (docs/domain.md "Maintainers"): the API from claim to verified maintainer, the
recheck's two-miss rule and the mode it restores, a failing forge, who may see a claim, and the conflict rule in
the quorum. The forge is a loopback server (tests/maintainers/conftest.py)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.accounts.models import Account
from app.accounts.service import create_token
from app.maintainers import recheck
from app.registry.models import Repository
from app.reports.checks import record_check
from app.reports.service import submit_report
from tests import factories
from tests.maintainers.support import Forge
from tests.reports.support import check_body, report_body, reviewer
from tests.sql import execute, one, scalar

SCOPE = "repositories:maintain"


async def bearer(account: Account, *scopes: str) -> dict[str, str]:
    return {"Authorization": "Bearer " + await create_token(account.id, list(scopes or (SCOPE,)))}


def claims_url(repo: Repository) -> str:
    return f"/api/v1/repos/{repo.host}/{repo.owner}/{repo.name}/claims"


async def mode_of(repo: Repository) -> str:
    return str(await scalar("SELECT participation_mode FROM repositories WHERE id = :id", id=repo.id))


async def claim(client: httpx.AsyncClient, repo: Repository, headers: dict[str, str]) -> dict[str, Any]:
    answer = await client.post(claims_url(repo), headers=headers)
    assert answer.status_code in (200, 201), answer.text
    result: dict[str, Any] = answer.json()["claim"]
    return result


async def verify(client: httpx.AsyncClient, claim_id: int, headers: dict[str, str]) -> httpx.Response:
    return await client.post(f"/api/v1/claims/{claim_id}/verify", headers=headers, json={})


async def test_claim_verify_recheck_and_the_mode_it_restores(
    client: httpx.AsyncClient, forge: Forge, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = await factories.create_repository()
    alice, bob = await factories.create_account(), await factories.create_account()
    alice_h, bob_h = await bearer(alice), await bearer(bob)
    ref = (repo.host, repo.owner, repo.name)

    made = await client.post(claims_url(repo), headers=alice_h)
    assert made.status_code == 201, made.text
    first = made.json()["claim"]
    assert first["state"] == "pending" and first["path"] == ".tarakan/verify.txt"
    assert first["repository"] == f"{repo.host}/{repo.owner}/{repo.name}"
    assert set(first) == {"id", "repository", "state", "token", "path", "expires_at", "verified_at"}
    again = await client.post(claims_url(repo), headers=alice_h, content=b"{}")
    assert again.status_code == 200 and again.json()["claim"] == first  # the pending claim, not a new token

    # before the file exists: 422 naming token, the claim stays pending
    missing = await verify(client, first["id"], alice_h)
    assert missing.status_code == 422 and "token" in missing.json()["errors"], missing.text
    forge.serve_file(*ref, "# Tarakan verification\nsomeone-elses-token\n")
    other = await verify(client, first["id"], alice_h)
    assert other.status_code == 422 and "does not hold" in other.json()["errors"]["token"][0]
    assert await mode_of(repo) == "unclaimed"

    forge.serve_file(*ref, f"# Tarakan verification\n  {first['token']}  \n")
    verified = await verify(client, first["id"], alice_h)
    assert verified.status_code == 200, verified.text
    assert verified.json()["claim"]["state"] == "verified" and verified.json()["claim"]["verified_at"]
    assert await mode_of(repo) == "maintainer_verified"
    assert (await client.post(claims_url(repo), headers=alice_h)).status_code == 409

    # several accounts may maintain one repository: the file holds a line per token
    second = await claim(client, repo, bob_h)
    forge.serve_file(*ref, f"{first['token']}\n{second['token']}\n")
    assert (await verify(client, second["id"], bob_h)).status_code == 200
    assert await scalar("SELECT count(*) FROM repository_maintainers WHERE ended_at IS NULL") == 2

    # a failing forge ends nothing, however long it fails
    monkeypatch.setenv("MAINTAINER_RECHECK_HOURS", "1")
    forge.fail(*ref)
    assert await recheck.recheck_maintainers() == []
    await execute("UPDATE repository_maintainers SET since = since - interval '3 days'")
    assert await recheck.recheck_maintainers() == []
    assert await scalar("SELECT count(*) FROM repository_maintainers WHERE first_missing_at IS NOT NULL") == 0

    # the file gone: a first miss starts the count, a second less than MAINTAINER_RECHECK_HOURS later ends nothing
    forge.remove(*ref)
    assert await recheck.recheck_maintainers() == []
    assert await recheck.recheck_maintainers() == []
    assert await scalar("SELECT count(*) FROM repository_maintainers WHERE ended_at IS NULL") == 2
    # a miss at least that many hours after the first ends both, and the last end restores the replaced mode
    await execute("UPDATE repository_maintainers SET first_missing_at = first_missing_at - interval '61 minutes'")
    ended = await recheck.recheck_maintainers()
    assert sorted(e.handle for e in ended) == sorted([alice.handle, bob.handle])
    assert {e.reason for e in ended} == {"file_missing"}
    assert await scalar("SELECT count(*) FROM repository_maintainers WHERE ended_at IS NULL") == 0
    assert await mode_of(repo) == "unclaimed"

    # claiming again after the end: a new claim; the forge failing now is a 503 naming it, with Retry-After
    third = await claim(client, repo, alice_h)
    assert third["id"] != first["id"] and third["token"] != first["token"]
    forge.fail(*ref, status=502)
    unavailable = await verify(client, third["id"], alice_h)
    assert unavailable.status_code == 503, unavailable.text
    assert int(unavailable.headers["Retry-After"]) > 0
    assert "127.0.0.1" in unavailable.json()["errors"]["forge"][0]
    assert (await one("SELECT state FROM maintainer_claims WHERE id = :id", id=third["id"])) == {"state": "pending"}


async def test_a_found_file_resets_the_misses_and_paused_or_curated_stay(
    client: httpx.AsyncClient, forge: Forge, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAINTAINER_RECHECK_HOURS", "0")
    repo = await factories.create_repository()
    await execute("UPDATE repositories SET participation_mode = 'curated' WHERE id = :id", id=repo.id)
    account = await factories.create_account()
    headers = await bearer(account)
    made = await claim(client, repo, headers)
    forge.serve_file(repo.host, repo.owner, repo.name, made["token"])
    assert (await verify(client, made["id"], headers)).status_code == 200
    assert await mode_of(repo) == "curated"  # a moderator's decision stays
    forge.remove(repo.host, repo.owner, repo.name)
    assert await recheck.recheck_maintainers() == []  # the first miss
    forge.serve_file(repo.host, repo.owner, repo.name, made["token"])
    assert await recheck.recheck_maintainers() == []  # found again: the count starts over
    assert await scalar("SELECT first_missing_at FROM repository_maintainers") is None
    forge.remove(repo.host, repo.owner, repo.name)
    assert await recheck.recheck_maintainers() == []
    assert [e.handle for e in await recheck.recheck_maintainers()] == [account.handle]
    assert await mode_of(repo) == "curated"


async def test_who_may_claim_and_verify(client: httpx.AsyncClient, forge: Forge) -> None:
    repo = await factories.create_repository()
    owner, stranger = await factories.create_account(), await factories.create_account()
    owner_h = await bearer(owner)
    made = await claim(client, repo, owner_h)

    # another account's claim is not found, nor is a malformed or unknown id
    assert (await verify(client, made["id"], await bearer(stranger))).status_code == 404
    for claim_id in ("999999", "0", "abc", "١٢"):
        assert (await client.post(f"/api/v1/claims/{claim_id}/verify", headers=owner_h)).status_code == 404
    # only listed repositories may be claimed
    for status in ("pending", "quarantined"):
        hidden = await factories.create_repository(listing_status=status)
        assert (await client.post(claims_url(hidden), headers=owner_h)).status_code == 404
    unknown = await client.post("/api/v1/repos/github.com/nobody/nothing/claims", headers=owner_h)
    assert unknown.status_code == 404
    # the scope, the token, the body
    assert (await client.post(claims_url(repo), headers=await bearer(owner, "findings:submit"))).status_code == 403
    assert (await client.post(claims_url(repo))).status_code == 401
    body = await client.post(claims_url(repo), headers=owner_h, json={"token": "mine"})
    assert body.status_code == 422 and "body" in body.json()["errors"]
    assert (await client.post(claims_url(repo), headers=owner_h, content=b"x" * 2048)).status_code == 413
    restricted = await factories.create_account(state="restricted")
    assert (await client.post(claims_url(repo), headers=await bearer(restricted))).status_code == 403
    assert await scalar("SELECT count(*) FROM maintainer_claims") == 1
    assert forge.asked == []  # nothing above reached the forge


async def test_a_maintainers_own_checks_never_count_toward_the_quorum(client: httpx.AsyncClient, forge: Forge) -> None:
    repo = await factories.create_repository()
    submitted = await submit_report(await factories.create_account(), repo.host, repo.owner, repo.name, report_body())
    canonical = submitted["findings"][0]["canonical_public_id"]
    insider, outsider = await reviewer(), await reviewer()
    await record_check(insider, canonical, check_body())
    await record_check(outsider, canonical, check_body())
    status = "SELECT status, confirmations_count FROM canonical_findings WHERE public_id = :id"
    assert await one(status, id=canonical) == {"status": "verified", "confirmations_count": 2}

    # the insider proves they maintain the repository: their check stops counting at once
    headers = await bearer(insider)
    made = await claim(client, repo, headers)
    forge.serve_file(repo.host, repo.owner, repo.name, made["token"])
    assert (await verify(client, made["id"], headers)).status_code == 200
    assert await one(status, id=canonical) == {"status": "open", "confirmations_count": 1}

    # and after the maintainership ends too (it was their code)
    await execute("UPDATE repository_maintainers SET ended_at = now(), ended_reason = 'moderation'")
    await record_check(await reviewer(), canonical, check_body())
    assert await one(status, id=canonical) == {"status": "verified", "confirmations_count": 2}
