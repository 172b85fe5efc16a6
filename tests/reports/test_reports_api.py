"""The report API over HTTP: authentication and scopes, the 201 body, repository gates, run_id idempotence,
rate limits and the daily quota, the request body limit, and nothing written on any refusal."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.accounts.models import Account
from app.accounts.service import create_token
from app.kernel import db
from app.kernel.answers import as_json
from app.kernel.errors import ValidationError
from app.kernel.intake import off_loop
from app.registry.models import Repository
from app.reports.intake import prepare_report
from app.reports.service import store_report, submit_report
from tests import factories
from tests.reports.support import COMMIT, finding, report_body, row_counts


async def token_for(account: Account, *scopes: str) -> dict[str, str]:
    secret = await create_token(account.id, list(scopes or ("findings:submit",)))
    return {"Authorization": f"Bearer {secret}"}


def reports_url(repo: Repository) -> str:
    return f"/api/v1/repos/{repo.host}/{repo.owner}/{repo.name}/reports"


async def post(client: httpx.AsyncClient, url: str, headers: dict[str, str], body: Any) -> httpx.Response:
    return await client.post(url, headers=headers, content=json.dumps(body))


async def test_submit_returns_the_report_and_its_findings(client: httpx.AsyncClient) -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository("acme", "widget")
    headers = await token_for(account)
    body = report_body(
        findings=[
            finding(title="Verified: SQL injection in login."),
            finding(file="src/App.ts", line_start=None, line_end=None, title="Open redirect after login"),
        ],
        run_id="run-1",
        notes="nightly scan",
    )
    response = await post(client, reports_url(repo), headers, body)
    assert response.status_code == 201, response.text
    data = response.json()
    assert set(data) == {
        "id",
        "kind",
        "repository",
        "host",
        "commit_sha",
        "commit_committed_at",
        "model",
        "prompt_version",
        "run_id",
        "provenance",
        "provenance_attestation",
        "review_kind",
        "findings_count",
        "verified",
        "review_status",
        "visibility",
        "disclosed",
        "record_url",
        "findings",
    }
    assert data["kind"] == "report"
    assert (data["host"], data["repository"]) == ("github.com", "acme/widget")
    assert (data["commit_sha"], data["run_id"], data["findings_count"]) == (COMMIT, "run-1", 2)
    assert (data["review_status"], data["visibility"], data["verified"], data["disclosed"]) == (
        "quarantined",
        "public",
        False,
        True,
    )
    assert (data["provenance"], data["provenance_attestation"]) == ("agent", "self_reported")
    assert data["record_url"] == "http://testserver/repos/github.com/acme/widget"
    first, second = data["findings"]
    # the confidence prefix and the trailing dot normalize away (docs/domain.md §2.1)
    assert first["pattern_key"] == pattern_key_of("SQL injection in login")
    assert second["pattern_key"] == pattern_key_of("Open redirect after login")
    assert first["canonical_public_id"] != second["canonical_public_id"]
    for item in data["findings"]:
        assert set(item) == {
            "public_id",
            "canonical_public_id",
            "pattern_key",
            "title",
            "severity",
            "disposition",
            "url",
            "evidence",
            "held",
        }
        assert item["held"] is None  # an account in good standing publishes at once
        assert item["url"] == f"http://testserver/findings/{item['public_id']}"
        assert item["disposition"] == "new"
        assert item["evidence"] == {"state": "unchecked", "commit": COMMIT, "anchor": None}  # EVIDENCE_CHECK=off
        uuid.UUID(item["canonical_public_id"])
    async with db.read_session(replica=False) as session:
        raw, notes = (await session.execute(text("SELECT raw_document, notes FROM scans"))).one()
    assert json.loads(raw) == body["document"]
    assert notes == "nightly scan"


def pattern_key_of(title: str) -> str:
    from app.reports.finding_memory import pattern_key

    return pattern_key(title)


async def test_a_retried_run_answers_200_with_the_stored_report_and_stores_nothing(client: httpx.AsyncClient) -> None:
    # the first attempt committed but its answer was lost (docs/reliability.md "Retries"): the retry gets the report
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    headers = await token_for(account)
    body = report_body(run_id="agent-run-42", notes="first try")
    first = await post(client, reports_url(repo), headers, body)
    assert first.status_code == 201, first.text
    before = await row_counts()
    again = await post(client, reports_url(repo), headers, body)
    assert again.status_code == 200, again.text
    assert again.json() == first.json()
    assert await row_counts() == before
    # run_id is unique per submitter, not globally
    other = await factories.create_account(state="active")
    assert (await post(client, reports_url(repo), await token_for(other), body)).status_code == 201


@pytest.mark.parametrize(
    "change",
    [{"notes": "second try"}, {"commit_sha": "b" * 40}, {"model": "other-model"}, {"findings": "another"}],
    ids=["notes", "commit", "model", "document"],
)
async def test_the_same_run_id_with_other_content_is_refused(client: httpx.AsyncClient, change: dict[str, str]) -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    headers = await token_for(account)
    body = report_body(run_id="agent-run-42", notes="first try")
    assert (await post(client, reports_url(repo), headers, body)).status_code == 201
    if "findings" in change:
        changed = report_body(run_id="agent-run-42", notes="first try", findings=[finding(title="XSS in template")])
    else:
        changed = {**body, **change}
    again = await post(client, reports_url(repo), headers, changed)
    assert again.status_code == 422
    assert again.json() == {"errors": {"run_id": ["this agent run was already submitted"]}}
    assert (await row_counts())["scans"] == 1


async def test_the_same_run_on_another_repository_is_refused(client: httpx.AsyncClient) -> None:
    account = await factories.create_account(state="active")
    one, two = await factories.create_repository("acme", "one"), await factories.create_repository("acme", "two")
    headers = await token_for(account)
    body = report_body(run_id="agent-run-42")
    assert (await post(client, reports_url(one), headers, body)).status_code == 201
    assert (await post(client, reports_url(two), headers, body)).status_code == 422
    assert (await row_counts())["scans"] == 1


async def test_authentication_and_scopes(client: httpx.AsyncClient) -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    missing = await post(client, reports_url(repo), {}, report_body())
    assert missing.status_code == 401
    wrong_scope = await post(client, reports_url(repo), await token_for(account, "findings:verify"), report_body())
    assert wrong_scope.status_code == 403
    assert "token" in wrong_scope.json()["errors"]
    reviews_scope = await post(client, reports_url(repo), await token_for(account, "reviews:submit"), report_body())
    assert reviews_scope.status_code == 201
    restricted = await factories.create_account(state="restricted")
    refused = await post(client, reports_url(repo), await token_for(restricted), report_body())
    assert refused.status_code == 403
    assert (await row_counts())["scans"] == 1


async def test_repository_gates(client: httpx.AsyncClient) -> None:
    account = await factories.create_account(state="active")
    moderator = await factories.create_account(state="active", platform_role="moderator")
    headers = await token_for(account)
    unknown = await client.post(
        "/api/v1/repos/github.com/nobody/nothing/reports", headers=headers, content=json.dumps(report_body())
    )
    assert unknown.status_code == 404
    assert unknown.json() == {"errors": {"repository": ["is not registered"]}}
    quarantined = await factories.create_repository(listing_status="quarantined")
    assert (await post(client, reports_url(quarantined), headers, report_body())).status_code == 404
    assert (await post(client, reports_url(quarantined), await token_for(moderator), report_body())).status_code == 201
    paused = await factories.create_repository()
    async with db.transaction() as session:
        await session.execute(
            text("UPDATE repositories SET participation_mode = 'paused' WHERE id = :id"), {"id": paused.id}
        )
    refused = await post(client, reports_url(paused), headers, report_body())
    assert refused.status_code == 403
    assert "repository" in refused.json()["errors"]
    assert (await post(client, reports_url(paused), await token_for(moderator), report_body())).status_code == 201
    assert (await row_counts())["scans"] == 2


async def test_owner_and_name_are_matched_case_insensitively(client: httpx.AsyncClient) -> None:
    account = await factories.create_account(state="active")
    await factories.create_repository("acme", "widget")
    response = await client.post(
        "/api/v1/repos/github.com/ACME/Widget/reports",
        headers=await token_for(account),
        content=json.dumps(report_body()),
    )
    assert response.status_code == 201
    assert response.json()["repository"] == "acme/widget"


async def test_validation_error_names_the_field_and_writes_nothing(client: httpx.AsyncClient) -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    body = report_body(findings=[finding(), finding(), finding(line_start=True)])
    response = await post(client, reports_url(repo), await token_for(account), body)
    assert response.status_code == 422
    assert response.json() == {"errors": {"findings[2].line_start": ["must be an integer"]}}
    assert all(count == 0 for count in (await row_counts()).values())


async def test_bad_json_and_non_objects(client: httpx.AsyncClient) -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    headers = await token_for(account)
    broken = await client.post(reports_url(repo), headers=headers, content=b'{"commit_sha": ')
    assert broken.status_code == 400
    assert broken.json() == {"errors": {"body": ["must be valid JSON"]}}
    nan = await client.post(reports_url(repo), headers=headers, content=b'{"x": NaN}')
    assert nan.status_code == 400
    array = await client.post(reports_url(repo), headers=headers, content=b"[1, 2]")
    assert array.status_code == 422
    assert array.json() == {"errors": {"body": ["must be a JSON object"]}}
    assert (await row_counts())["scans"] == 0


async def test_body_limit(client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REQUEST_BODY_LIMIT", "4096")
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    headers = await token_for(account)
    big = report_body(notes="n" * 1999, findings=[finding(description="d" * 3000)])
    response = await post(client, reports_url(repo), headers, big)
    assert response.status_code == 413
    assert response.json() == {"errors": {"body": ["must be at most 4096 bytes"]}}

    async def stream() -> Any:  # no Content-Length: the cap applies while reading
        payload = json.dumps(big).encode()
        for i in range(0, len(payload), 1000):
            yield payload[i : i + 1000]

    streamed = await client.post(reports_url(repo), headers=headers, content=stream())
    assert streamed.status_code == 413
    assert (await row_counts())["scans"] == 0
    small = await post(client, reports_url(repo), headers, report_body())
    assert small.status_code == 201


async def test_rate_limit_per_account_and_repository(client: httpx.AsyncClient) -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    other_repo = await factories.create_repository()
    headers = await token_for(account)
    for _ in range(5):
        await factories.create_scan(repo, account)
    per_repo = await post(client, reports_url(repo), headers, report_body())
    assert per_repo.status_code == 429
    assert per_repo.headers["retry-after"] == "60"
    assert "per repository" in per_repo.json()["errors"]["rate_limit"][0]
    for _ in range(4):
        await factories.create_scan(other_repo, account)
    assert (await post(client, reports_url(other_repo), headers, report_body())).status_code == 201
    third_repo = await factories.create_repository()
    per_account = await post(client, reports_url(third_repo), headers, report_body())
    assert per_account.status_code == 429
    assert per_account.headers["retry-after"] == "60"
    assert "per account" in per_account.json()["errors"]["rate_limit"][0]


async def test_daily_quota_by_trust(client: httpx.AsyncClient) -> None:
    newcomer = await factories.create_account(state="probation")
    repo = await factories.create_repository()
    headers = await token_for(newcomer)
    async with db.transaction() as session:  # three reports earlier today, outside the per-minute window
        for i in range(3):
            await session.execute(
                text(
                    "INSERT INTO scans (repository_id, submitted_by_id, commit_sha, inserted_at)"
                    " VALUES (:r, :a, :sha, now() - make_interval(hours => :h))"
                ),
                {"r": repo.id, "a": newcomer.id, "sha": factories.sha(i), "h": i + 1},
            )
    refused = await post(client, reports_url(repo), headers, report_body())
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "86400"
    assert refused.json()["errors"]["rate_limit"] == ["daily quota of 3 reports reached"]
    assert (await row_counts())["scans"] == 3
    moderator = await factories.create_account(state="probation", platform_role="moderator")
    for _ in range(12):  # moderators are exempt from every limit
        await factories.create_scan(repo, moderator)
    assert (await post(client, reports_url(repo), await token_for(moderator), report_body())).status_code == 201


async def test_check_and_confirmation_endpoints(client: httpx.AsyncClient) -> None:
    submitter = await factories.create_account(state="active")
    reviewer = await factories.create_account(state="active", trust_tier="reviewer")
    repo = await factories.create_repository()
    report = (await post(client, reports_url(repo), await token_for(submitter), report_body())).json()
    canonical = report["findings"][0]["canonical_public_id"]
    verify = await token_for(reviewer, "findings:verify")
    check = {
        "commit_sha": COMMIT,
        "verdict": "confirmed",
        "provenance": "human",
        "notes": "Reproduced locally with the PoC.",
    }
    response = await post(client, f"/api/v1/findings/{canonical}/checks", verify, {**check, "notes": "x" * 25})
    assert response.status_code == 201, response.text
    data = response.json()
    assert set(data) >= {"id", "canonical_public_id", "verdict", "commit_sha", "status", "confirmations_count"}
    assert (data["status"], data["confirmations_count"], data["disputes_count"]) == ("open", 1, 0)
    assert (await post(client, f"/api/v1/findings/{uuid.uuid4()}/checks", verify, check)).status_code == 404
    assert (await post(client, "/api/v1/findings/not-a-uuid/checks", verify, check)).status_code == 404
    submit_only = await token_for(reviewer, "findings:submit")
    assert (await post(client, f"/api/v1/findings/{canonical}/checks", submit_only, check)).status_code == 403

    other = await factories.create_account(state="active", trust_tier="reviewer")
    confirmation = {"verdict": "disputed", "provenance": "human", "notes": "Could not reproduce at all."}
    url = f"/api/v1/reports/{report['id']}/confirmations"
    response = await post(client, url, await token_for(other, "findings:verify"), confirmation)
    assert response.status_code == 201, response.text
    assert response.json()["checks_recorded"] == 1
    assert (await post(client, "/api/v1/reports/999999/confirmations", verify, confirmation)).status_code == 404
    assert (await post(client, "/api/v1/reports/abc/confirmations", verify, confirmation)).status_code == 404


async def submitted(account: Account, repo: Repository, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """`submit_report`'s two steps, keeping whether the second stored the report (False: the run was stored)."""
    report = await off_loop(lambda budget: prepare_report(body, budget))
    stored, created = await store_report(account, repo.host, repo.owner, repo.name, report)
    return as_json(stored), created


async def test_concurrent_submissions_of_one_run_store_one_report() -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    body = report_body(run_id="racing-run")
    results = await asyncio.gather(
        *(submitted(account, repo, dict(body)) for _ in range(3)),
        return_exceptions=True,
    )
    assert all(isinstance(r, tuple) for r in results), results
    created = [created for _, created in results]  # type: ignore[misc]
    assert sorted(created) == [False, False, True]
    assert len({report["id"] for report, _ in results}) == 1  # type: ignore[misc]
    assert (await row_counts())["scans"] == 1


async def test_concurrent_submissions_of_one_run_with_other_content_store_one_report() -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    results = await asyncio.gather(
        *(
            submit_report(account, repo.host, repo.owner, repo.name, report_body(run_id="racing-run", notes=f"try {i}"))
            for i in range(3)
        ),
        return_exceptions=True,
    )
    stored = [r for r in results if isinstance(r, dict)]
    refused = [r for r in results if isinstance(r, ValidationError)]
    assert len(stored) == 1 and len(refused) == 2, results
    assert all(r.errors == {"run_id": ["this agent run was already submitted"]} for r in refused)
    assert (await row_counts())["scans"] == 1
