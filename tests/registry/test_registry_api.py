"""Registering repositories (`POST /api/v1/repositories` and the service) and deleting them."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, text

from app.accounts.service import create_token
from app.kernel import db
from app.kernel.audit import AuditEvent
from app.kernel.errors import Forbidden, NotFound, ValidationError
from app.moderation.service import delete_repository
from app.registry.models import Repository
from app.registry.service import get_repository, register_repository
from app.reports.finding_memory import pattern_key
from app.reports.models import CanonicalFinding, CanonicalFindingCheck, Scan, ScanFinding
from tests import factories

REPOSITORY_KEYS = {
    "id",
    "host",
    "owner",
    "name",
    "canonical_url",
    "listing_status",
    "status",
    "scan_count",
    "open_findings_count",
    "verified_findings_count",
    "url",
    "default_branch",
    "description",
    "primary_language",
    "stars_count",
    "metadata",
}


async def repository_count() -> int:
    async with db.read_session(replica=False) as session:
        return int((await session.execute(select(func.count()).select_from(Repository))).scalar_one())


async def bearer(*scopes: str, state: str = "active") -> dict[str, str]:
    account = await factories.create_account(state=state)
    return {"Authorization": f"Bearer {await create_token(account.id, list(scopes))}"}


async def post(client: httpx.AsyncClient, body: Any, headers: dict[str, str]) -> httpx.Response:
    content = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return await client.post(
        "/api/v1/repositories", content=content, headers={**headers, "Content-Type": "application/json"}
    )


# --- API ----------------------------------------------------------------------------------------------------


async def test_register_returns_201_then_200_with_the_same_repository(client: httpx.AsyncClient) -> None:
    headers = await bearer("repositories:write")
    first = await post(client, {"host": "GitHub.com", "owner": " Acme-Labs ", "name": "Widget.JS"}, headers)
    assert first.status_code == 201, first.text
    body = first.json()
    assert set(body) == REPOSITORY_KEYS
    assert body["host"] == "github.com" and body["owner"] == "acme-labs" and body["name"] == "widget.js"
    assert body["canonical_url"] == "https://github.com/acme-labs/widget.js"
    assert body["url"] == "http://testserver/repos/github.com/acme-labs/widget.js"
    assert first.headers["location"] == body["url"]
    assert (body["listing_status"], body["status"], body["scan_count"]) == ("listed", "unscanned", 0)
    assert (body["open_findings_count"], body["verified_findings_count"]) == (0, 0)

    again = await post(client, {"host": "github.com", "owner": "acme-labs", "name": "widget.js"}, headers)
    assert again.status_code == 200
    assert again.json() == body
    assert await repository_count() == 1


async def test_findings_submit_scope_may_register_too(client: httpx.AsyncClient) -> None:
    response = await post(
        client, {"host": "codeberg.org", "owner": "forgejo", "name": "forgejo"}, await bearer("findings:submit")
    )
    assert response.status_code == 201
    assert response.json()["canonical_url"] == "https://codeberg.org/forgejo/forgejo"


async def test_submitter_is_recorded(client: httpx.AsyncClient) -> None:
    account = await factories.create_account()
    token = await create_token(account.id, ["repositories:write"])
    response = await post(
        client, {"host": "gitlab.com", "owner": "team", "name": "app"}, {"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == 201
    repository = await get_repository("gitlab.com", "team", "app")
    assert repository is not None and repository.submitted_by_id == account.id


async def test_missing_token_is_401_and_writes_nothing(client: httpx.AsyncClient) -> None:
    response = await post(client, {"host": "github.com", "owner": "a", "name": "b"}, {})
    assert response.status_code == 401
    assert list(response.json()["errors"]) == ["authorization"]
    assert await repository_count() == 0


async def test_wrong_scope_is_403_naming_the_scope(client: httpx.AsyncClient) -> None:
    response = await post(client, {"host": "github.com", "owner": "a", "name": "b"}, await bearer("findings:verify"))
    assert response.status_code == 403
    assert "repositories:write" in response.json()["errors"]["scope"][0]
    assert await repository_count() == 0


async def test_suspended_account_is_403(client: httpx.AsyncClient) -> None:
    headers = await bearer("repositories:write", state="suspended")
    response = await post(client, {"host": "github.com", "owner": "a", "name": "b"}, headers)
    assert response.status_code == 403
    assert response.json() == {"errors": {"account": ["is suspended"]}}
    assert await repository_count() == 0


@pytest.mark.parametrize(
    ("body", "status", "errors"),
    [
        (b"{not json", 400, {"body": ["must be valid JSON"]}),
        (b"", 400, {"body": ["must be valid JSON"]}),
        (b"\xff\xfe", 400, {"body": ["must be valid JSON"]}),
        ([{"host": "github.com"}], 400, {"body": ["must be a JSON object"]}),
        ("null", 400, {"body": ["must be a JSON object"]}),
        ({}, 422, {"host": ["is required"], "owner": ["is required"], "name": ["is required"]}),
        ({"host": "github.com", "owner": "acme"}, 422, {"name": ["is required"]}),
        ({"host": "github.com", "owner": "  ", "name": "x"}, 422, {"owner": ["is required"]}),
        (
            {"host": "github.com", "owner": 7, "name": ["x"]},
            422,
            {"owner": ["must be a string"], "name": ["must be a string"]},
        ),
        (
            {"host": "bitbucket.org", "owner": "acme", "name": "x"},
            422,
            {"host": ["must be one of github.com, gitlab.com, codeberg.org, tarakan.lol"]},
        ),
    ],
)
async def test_bad_bodies_name_the_field_and_write_nothing(
    client: httpx.AsyncClient, body: Any, status: int, errors: dict[str, list[str]]
) -> None:
    response = await post(client, body, await bearer("repositories:write"))
    assert response.status_code == status
    assert response.json() == {"errors": errors}
    assert await repository_count() == 0


@pytest.mark.parametrize(
    ("owner", "name", "field"),
    [
        ("-acme", "x", "owner"),
        ("acme-", "x", "owner"),
        ("ac_me", "x", "owner"),
        ("a" * 40, "x", "owner"),
        ("acme", "..", "name"),
        ("acme", ".", "name"),
        ("acme", "has space", "name"),
        ("acme", "slash/name", "name"),
        ("acme", "x" * 101, "name"),
    ],
)
async def test_invalid_owner_or_name_is_422_naming_it(
    client: httpx.AsyncClient, owner: str, name: str, field: str
) -> None:
    response = await post(client, {"host": "github.com", "owner": owner, "name": name}, await bearer("findings:submit"))
    assert response.status_code == 422
    assert list(response.json()["errors"]) == [field]
    assert await repository_count() == 0


async def test_edge_lengths_are_accepted(client: httpx.AsyncClient) -> None:
    headers = await bearer("repositories:write")
    response = await post(client, {"host": "tarakan.lol", "owner": "a" * 39, "name": "n" * 100}, headers)
    assert response.status_code == 201
    assert (await post(client, {"host": "github.com", "owner": "a", "name": "..."}, headers)).status_code == 201


async def test_oversized_body_is_413(client: httpx.AsyncClient) -> None:
    body = {"host": "github.com", "owner": "acme", "name": "x", "padding": "p" * 20_000}
    response = await post(client, body, await bearer("repositories:write"))
    assert response.status_code == 413
    assert list(response.json()["errors"]) == ["body"]
    assert await repository_count() == 0


# --- service --------------------------------------------------------------------------------------------------


async def test_concurrent_registrations_create_one_row() -> None:
    results = await asyncio.gather(*(register_repository("github.com", "acme", "race") for _ in range(5)))
    assert sorted(created for _, created in results) == [False, False, False, False, True]
    assert len({repo.id for repo, _ in results}) == 1
    assert await repository_count() == 1


async def test_existing_repository_is_returned_unchanged() -> None:
    repo, created = await register_repository("github.com", "acme", "widget", listing_status="quarantined")
    assert created and repo.listing_status == "quarantined"
    again, created_again = await register_repository("github.com", "ACME", "widget")
    assert not created_again and again.id == repo.id and again.listing_status == "quarantined"


async def test_unknown_listing_status_is_rejected() -> None:
    with pytest.raises(ValidationError) as info:
        await register_repository("github.com", "acme", "widget", listing_status="hidden")
    assert list(info.value.errors) == ["listing_status"]
    assert await repository_count() == 0


async def test_get_repository_normalizes_and_tolerates_garbage() -> None:
    repo, _ = await register_repository("github.com", "acme", "widget")
    found = await get_repository("GITHUB.COM", "Acme", "Widget")
    assert found is not None and found.id == repo.id
    assert await get_repository("github.com", "-bad-", "widget") is None
    assert await get_repository("github.com", "acme", "missing") is None


async def _count(model: type[Any], **where: Any) -> int:
    async with db.read_session(replica=False) as session:
        stmt = select(func.count()).select_from(model)
        for column, value in where.items():
            stmt = stmt.where(getattr(model, column) == value)
        return int((await session.execute(stmt)).scalar_one())


async def test_delete_removes_reports_findings_and_checks_and_marks_patterns_dirty() -> None:
    moderator = await factories.create_account(platform_role="moderator")
    reviewer = await factories.create_account(trust_tier="reviewer")
    doomed = await factories.create_repository("acme", "doomed")
    kept = await factories.create_repository("acme", "kept")
    title = "SQL injection via string concatenation"
    scan, canonical, _ = await factories.create_instance(doomed, moderator, title)
    # a second report seeing the same canonical, and a check on it: every dependent row must go
    second = await factories.create_scan(doomed, moderator)
    await factories.create_occurrence(second, canonical)
    async with db.transaction() as session:
        session.add(
            CanonicalFindingCheck(
                canonical_finding_id=canonical.id,
                account_id=reviewer.id,
                commit_sha=scan.commit_sha,
                verdict="confirmed",
                provenance="human",
                notes="Reproduced locally with the payload in the report.",
            )
        )
    await factories.create_instance(kept, moderator, title)

    await delete_repository("github.com", "acme", "doomed", actor_id=moderator.id, reason="spam")

    assert await get_repository("github.com", "acme", "doomed") is None
    assert await _count(Scan, repository_id=doomed.id) == 0
    assert await _count(CanonicalFinding, repository_id=doomed.id) == 0
    assert await _count(CanonicalFindingCheck) == 0
    assert await _count(ScanFinding) == 1  # the kept repository's occurrence
    assert await _count(Scan, repository_id=kept.id) == 1
    async with db.read_session(replica=False) as session:
        dirty = (await session.execute(text("SELECT pattern_key, reason FROM infestation_dirty_keys"))).all()
        audit = (await session.execute(select(AuditEvent))).scalar_one()
        session.expunge(audit)
    assert [tuple(row) for row in dirty] == [(pattern_key(title), "delete")]
    assert (audit.action, audit.actor_id, audit.subject_type) == ("repository.delete", moderator.id, "repository")
    assert audit.subject_id == str(doomed.id) and audit.reason == "spam"
    assert audit.before is not None and audit.before["name"] == "doomed"


@pytest.mark.parametrize(("role", "state"), [("member", "active"), ("moderator", "suspended")])
async def test_only_acting_moderators_may_delete(role: str, state: str) -> None:
    actor = await factories.create_account(platform_role=role, state=state)
    repo = await factories.create_repository("acme", "widget")
    await factories.create_instance(repo, actor, "Open redirect after login")
    with pytest.raises(Forbidden):
        await delete_repository("github.com", "acme", "widget", actor_id=actor.id)
    assert await get_repository("github.com", "acme", "widget") is not None
    assert await _count(CanonicalFinding) == 1
    assert await _count(AuditEvent) == 0


async def test_deleting_an_unknown_repository_is_not_found() -> None:
    admin = await factories.create_account(platform_role="admin")
    with pytest.raises(NotFound) as info:
        await delete_repository("github.com", "acme", "ghost", actor_id=admin.id)
    assert list(info.value.errors) == ["repository"]
    assert await _count(AuditEvent) == 0
