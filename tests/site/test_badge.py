"""`/repos/{host}/{owner}/{name}/badge.svg`: "tarakan | N open" / "clean" / "not scanned" from the public findings,
a static cacheable SVG, 404 for a repository that is not public, and a takedown seen at the very next request."""

from __future__ import annotations

import httpx
from bs4 import BeautifulSoup

from app.moderation import service as moderation
from app.registry.models import Repository
from app.reports.service import submit_report
from tests import factories
from tests.reports.support import finding, reach_quorum, report_body

NOTES = "Evidence: the report discloses a live credential of a third party."


def badge_url(repo: Repository) -> str:
    return f"/repos/{repo.host}/{repo.owner}/{repo.name}/badge.svg"


async def badge_text(client: httpx.AsyncClient, repo: Repository) -> str:
    response = await client.get(badge_url(repo))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "image/svg+xml"
    svg = BeautifulSoup(response.text, "xml")
    assert svg.find("script") is None and "on" not in {a[:2] for tag in svg.find_all() for a in tag.attrs}
    title = svg.find("title")
    assert title is not None
    return title.get_text()


async def test_badge_counts_open_public_findings_and_follows_takedowns(client: httpx.AsyncClient) -> None:
    submitter = await factories.create_account(state="active")
    moderator = await factories.create_account(state="active", platform_role="moderator")
    repo = await factories.create_repository("acme", "widget")
    assert await badge_text(client, repo) == "tarakan: not scanned"
    findings = [finding(title="SQL injection in login"), finding(title="XSS in search", file="web/search.ts")]
    first = await submit_report(
        submitter, "github.com", "acme", "widget", report_body(findings=findings, commit_sha="b" * 40)
    )
    clean = report_body(findings=[finding(title="Weak hash", file="lib/hash.ex")])  # at support.COMMIT
    second = await submit_report(submitter, "github.com", "acme", "widget", clean)
    await reach_quorum(second["findings"][0]["canonical_public_id"], "fixed")
    assert await badge_text(client, repo) == "tarakan: 2 open"  # the fixed one is not open
    response = await client.get(badge_url(repo))
    assert response.headers["cache-control"] == "public, max-age=30, s-maxage=300"
    assert (await client.get(badge_url(repo), headers={"If-None-Match": response.headers["etag"]})).status_code == 304

    await moderation.change_scan_visibility(moderator, first["id"], "restricted", "takedown", NOTES)
    assert await badge_text(client, repo) == "tarakan: clean"
    await moderation.change_repository_listing(moderator, "github.com", "acme", "widget", "quarantined", "hold", NOTES)
    assert (await client.get(badge_url(repo))).status_code == 404


async def test_the_badge_counts_public_summary_findings_as_the_repository_metrics_do(
    client: httpx.AsyncClient,
) -> None:
    submitter = await factories.create_account(state="active")
    moderator = await factories.create_account(state="active", platform_role="moderator")
    repo = await factories.create_repository("acme", "summary")
    await submit_report(submitter, "github.com", "acme", "summary", report_body(findings=[finding()]))
    withheld = [finding(title="XSS in search", file="web/search.ts"), finding(title="Weak hash", file="lib/h.ex")]
    summary = await submit_report(
        submitter, "github.com", "acme", "summary", report_body(findings=withheld, commit_sha="c" * 40)
    )
    await moderation.change_scan_visibility(moderator, summary["id"], "public_summary", "withhold", NOTES)
    twin = (await client.get(f"/repos/{repo.host}/{repo.owner}/{repo.name}.json")).json()
    assert twin["repository"]["open_findings_count"] == 3
    assert await badge_text(client, repo) == "tarakan: 3 open"
    # findings.sarif still lists the fully public finding only (docs/domain.md §1.2)
    sarif = (await client.get(f"/repos/{repo.host}/{repo.owner}/{repo.name}/findings.sarif")).json()
    assert [r["message"]["text"] for r in sarif["runs"][0]["results"]] == ["SQL injection in login"]


async def test_badge_is_404_for_pending_and_unknown_repositories(client: httpx.AsyncClient) -> None:
    pending = await factories.create_repository("acme", "pending", listing_status="pending")
    assert (await client.get(badge_url(pending))).status_code == 404
    assert (await client.get("/repos/github.com/nobody/nothing/badge.svg")).status_code == 404


async def test_the_repository_page_links_its_machine_readable_documents(client: httpx.AsyncClient) -> None:
    repo = await factories.create_repository("acme", "linked")
    page = BeautifulSoup((await client.get(f"/repos/{repo.host}/{repo.owner}/{repo.name}")).text, "html.parser")
    links = {a.get_text(): str(a["href"]) for a in page.select("a[type]")}
    assert set(links) == {"public findings as SARIF 2.1.0", "Atom feed", "status badge"}
    for text, href in links.items():
        response = await client.get(href)
        assert response.status_code == 200, (text, href, response.text)
