"""The report routes' remembered bearer check (docs/security.md "API tokens"): a check passed in the last
`REMEMBERED_CHECK_SECONDS` lets a report's body in without the bearer statement, and the report's transaction checks
the token and the account again in its first statement, so a token revoked or an account suspended since is refused
with nothing written; every other route checks the token on every request."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from app.accounts import service as accounts
from app.accounts.models import Account
from app.accounts.service import create_token, revoke_token
from app.moderation.account_actions import change_account
from app.registry.models import Repository
from tests import factories
from tests.reports.support import report_body, row_counts
from tests.reports.test_reports_api import post, reports_url
from tests.statements import statements_sent

REVOKED = {"errors": {"authorization": ["this API token has been revoked"]}}


async def submitter(handle: str, role: str = "member") -> tuple[Account, Repository, str]:
    account = await factories.create_account(handle=handle, state="active", platform_role=role)
    repo = await factories.create_repository("acme", handle)
    return account, repo, await create_token(account.id, ["findings:submit"])


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


async def test_a_token_revoked_after_its_check_was_remembered_is_refused_at_the_next_report_with_nothing_written(
    client: httpx.AsyncClient,
) -> None:
    account, repo, secret = await submitter("revoked-agent")
    assert (await post(client, reports_url(repo), bearer(secret), report_body(run_id="r-1"))).status_code == 201
    assert await revoke_token(account.id, secret[:8]) == 1
    before = await row_counts()
    with statements_sent() as statements:
        refused = await post(client, reports_url(repo), bearer(secret), report_body(run_id="r-2"))
    # the bearer check's own answer, as an uncached route gives it
    assert refused.status_code == 401 and refused.json() == REVOKED, refused.text
    assert refused.headers["WWW-Authenticate"] == 'Bearer realm="tarakan"'
    # the remembered check let the body in; the report's first statement refused it (its transaction rolled back)
    assert len(statements) == 1 and "plan_cache_mode" in statements[0], statements
    lines = json.dumps({"repository": f"{repo.host}/{repo.owner}/{repo.name}", **report_body(run_id="r-3")})
    batch = await client.post(
        "/api/v1/reports/batch", headers=bearer(secret) | {"Content-Type": "application/x-ndjson"}, content=lines + "\n"
    )
    assert batch.status_code == 401 and batch.json() == REVOKED, batch.text  # the request's answer, not a line's
    assert await row_counts() == before


async def test_an_account_suspended_after_its_check_was_remembered_is_refused_at_the_next_report(
    client: httpx.AsyncClient,
) -> None:
    account, repo, secret = await submitter("suspended-agent")
    moderator = await factories.create_account(handle="mod", platform_role="moderator", state="active")
    assert (await post(client, reports_url(repo), bearer(secret), report_body(run_id="s-1"))).status_code == 201
    await change_account(
        moderator, account.handle, state="suspended", reason="spam", notes="floods the registry with reports"
    )
    before = await row_counts()
    with statements_sent() as statements:
        refused = await post(client, reports_url(repo), bearer(secret), report_body(run_id="s-2"))
    assert refused.status_code == 403 and list(refused.json()["errors"]) == ["account"], refused.text
    assert len(statements) == 1 and "plan_cache_mode" in statements[0], statements
    assert await row_counts() == before


async def test_other_routes_check_the_token_on_every_request(client: httpx.AsyncClient) -> None:
    """A GET of the API right after a report remembered the token's check: the revocation answers at once."""
    account, repo, secret = await submitter("get-agent")
    assert (await post(client, reports_url(repo), bearer(secret), report_body(run_id="g-1"))).status_code == 201
    assert await revoke_token(account.id, secret[:8]) == 1
    listing = await client.get(f"/api/v1/repos/{repo.host}/{repo.owner}/{repo.name}/webhooks", headers=bearer(secret))
    assert listing.status_code == 401 and listing.json() == REVOKED, listing.text


async def test_a_remembered_check_expires_and_the_oldest_goes_past_the_cap(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(accounts, "REMEMBERED_CHECK_SECONDS", 0.3)
    monkeypatch.setattr(accounts, "REMEMBERED_CHECKS", 2)
    monkeypatch.setattr(accounts, "_remembered", {})
    account, repo, secret = await submitter("expiring-agent", "moderator")  # no §9 limits over 7 reports
    runs = iter(range(100))

    async def statements_of(token: str) -> int:
        with statements_sent() as statements:
            answer = await post(client, reports_url(repo), bearer(token), report_body(run_id=f"e-{next(runs)}"))
        assert answer.status_code == 201, answer.text
        return len(statements)

    checked = await statements_of(secret)
    assert await statements_of(secret) == checked - 1  # remembered
    await asyncio.sleep(0.35)
    assert await statements_of(secret) == checked  # expired: checked again
    others = [await create_token(account.id, ["findings:submit"]) for _ in range(2)]
    for other in others:
        assert await statements_of(other) == checked
    assert await statements_of(secret) == checked  # two later tokens filled the cap: it went first
    assert await statements_of(others[1]) == checked - 1
