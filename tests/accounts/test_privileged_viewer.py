"""Registry pages: anonymous visitors see the public record only; platform moderators and reviewers see
restricted and summary-only reports and quarantined repositories, and such pages are never publicly cacheable."""

from __future__ import annotations

import httpx
from bs4 import BeautifulSoup

from app.accounts.sessions import COOKIE_NAME, open_session
from tests.factories import create_account, create_canonical, create_occurrence, create_repository, create_scan


async def _restricted_finding() -> tuple[str, str]:
    submitter = await create_account()
    repo = await create_repository("acme", "vault", listing_status="quarantined")
    scan = await create_scan(repo, submitter, visibility="restricted")
    canonical = await create_canonical(repo, "Secret leak in vault loader", commit_sha=scan.commit_sha)
    occurrence = await create_occurrence(scan, canonical)
    return "/repos/github.com/acme/vault", f"/findings/{occurrence.public_id}"


async def test_anonymous_visitors_get_404_and_moderators_see_everything(client: httpx.AsyncClient) -> None:
    repo_path, finding_path = await _restricted_finding()
    for path in (repo_path, finding_path, repo_path + ".json", finding_path + ".json"):
        assert (await client.get(path)).status_code == 404, path

    moderator = await create_account(platform_role="moderator", state="active")
    client.cookies.set(COOKIE_NAME, await open_session(moderator.id))
    page = await client.get(repo_path)
    assert page.status_code == 200
    assert page.headers["cache-control"] == "private, no-store"
    assert "Secret leak in vault loader" in BeautifulSoup(page.text, "lxml").get_text()
    finding = await client.get(finding_path)
    assert finding.status_code == 200
    assert finding.headers["cache-control"] == "private, no-store"
    twin = await client.get(finding_path + ".json")
    assert twin.json()["finding"]["title"] == "Secret leak in vault loader"


async def test_members_and_suspended_moderators_get_the_public_view(client: httpx.AsyncClient) -> None:
    repo_path, finding_path = await _restricted_finding()
    for account in (
        await create_account(platform_role="member", state="active"),
        await create_account(platform_role="moderator", state="suspended"),
    ):
        client.cookies.set(COOKIE_NAME, await open_session(account.id))
        assert (await client.get(repo_path)).status_code == 404
        assert (await client.get(finding_path)).status_code == 404


async def test_platform_reviewers_see_summary_only_findings(client: httpx.AsyncClient) -> None:
    submitter = await create_account()
    repo = await create_repository("acme", "open")
    scan = await create_scan(repo, submitter, visibility="public_summary")
    canonical = await create_canonical(repo, "Weak hash in password store", commit_sha=scan.commit_sha)
    occurrence = await create_occurrence(scan, canonical)
    path = f"/findings/{occurrence.public_id}"
    anonymous = await client.get(path)
    assert anonymous.status_code == 404
    reviewer = await create_account(trust_tier="reviewer", state="active")
    client.cookies.set(COOKIE_NAME, await open_session(reviewer.id))
    seen = await client.get(path)
    assert seen.status_code == 200 and "Weak hash in password store" in seen.text
