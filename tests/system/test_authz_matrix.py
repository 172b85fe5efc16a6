"""Every moderator page and every mutating moderation route × every kind of visitor → the expected status.

Anonymous: pages redirect to the login page (coming back after), forms answer 401. Members, reviewers and a
suspended moderator: 403. Moderators and admins: pages 200, valid forms 303 back to the console, except that only
admins change platform roles (a moderator's role change is a 403). A refused request writes nothing (checked on
the audit log)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.accounts.models import Account
from app.kernel import db
from tests.moderation.support import NOTES, SAME_ORIGIN, act_as, make_account, two_repository_pattern

VISITORS: dict[str, dict[str, str] | None] = {
    "anonymous": None,
    "member": {"platform_role": "member"},
    "reviewer": {"platform_role": "member", "trust_tier": "reviewer"},
    "moderator": {"platform_role": "moderator"},
    "admin": {"platform_role": "admin"},
    "suspended moderator": {"platform_role": "moderator", "state": "suspended"},
}


@dataclass
class World:
    scan_id: int
    repo: tuple[str, str, str]
    target_handle: str


async def build_world() -> World:
    submitter = await make_account("agent")
    target = await make_account("target")
    repos, scans = await two_repository_pattern(submitter)
    return World(scans[0].id, (repos[0].host, repos[0].owner, repos[0].name), target.handle)


PAGES = ["/moderation", "/moderation/repositories", "/moderation/accounts", "/moderation/held", "/moderation/audit"]


def form_requests(world: World) -> dict[str, tuple[str, dict[str, str]]]:
    host, owner, name = world.repo
    return {
        "scan visibility": (
            f"/moderation/scans/{world.scan_id}/visibility",
            {"visibility": "restricted", "reason": "takedown", "notes": NOTES},
        ),
        "repository listing": (
            f"/moderation/repos/{host}/{owner}/{name}/listing",
            {"listing_status": "quarantined", "reason": "malware", "notes": NOTES},
        ),
        "account change": (
            f"/moderation/accounts/{world.target_handle}",
            {"platform_role": "member", "state": "restricted", "reason": "abuse", "notes": NOTES},
        ),
        "role change": (
            f"/moderation/accounts/{world.target_handle}",
            {"platform_role": "moderator", "state": "active", "reason": "promote", "notes": NOTES},
        ),
    }


PAGE_EXPECTED = {
    "anonymous": 303,
    "member": 403,
    "reviewer": 403,
    "moderator": 200,
    "admin": 200,
    "suspended moderator": 403,
}
FORM_EXPECTED = {**PAGE_EXPECTED, "anonymous": 401, "moderator": 303, "admin": 303}
# only admins change platform roles; moderators still change account states (docs/domain.md §8)
ROUTE_EXPECTED = {"role change": {**FORM_EXPECTED, "moderator": 403}}


async def visitor(kind: str) -> Account | None:
    spec = VISITORS[kind]
    if spec is None:
        return None
    return await make_account("visitor", **spec)


async def audit_count() -> int:
    async with db.read_session(replica=False) as session:
        return int((await session.execute(text("SELECT count(*) FROM audit_events"))).scalar_one())


@pytest.mark.parametrize("path", PAGES)
@pytest.mark.parametrize("kind", list(VISITORS))
async def test_moderator_pages(client: httpx.AsyncClient, kind: str, path: str) -> None:
    await build_world()
    await act_as(client, await visitor(kind))
    response = await client.get(path)
    assert response.status_code == PAGE_EXPECTED[kind]
    if kind == "anonymous":
        assert response.headers["location"] == f"/login?next={path.replace('/', '%2F')}"
    if response.status_code == 403:
        assert "Moderators only" in response.text


@pytest.mark.parametrize("route", ["scan visibility", "repository listing", "account change", "role change"])
@pytest.mark.parametrize("kind", list(VISITORS))
async def test_mutating_routes(client: httpx.AsyncClient, kind: str, route: str) -> None:
    world = await build_world()
    await act_as(client, await visitor(kind))
    path, form = form_requests(world)[route]
    response = await client.post(path, data=form, headers=SAME_ORIGIN)
    expected = ROUTE_EXPECTED.get(route, FORM_EXPECTED)[kind]
    assert response.status_code == expected
    expected_audit = 1 if expected == 303 else 0
    assert await audit_count() == expected_audit


@pytest.mark.parametrize("kind", list(VISITORS))
async def test_unknown_subjects_do_not_leak_to_non_moderators(client: httpx.AsyncClient, kind: str) -> None:
    await act_as(client, await visitor(kind))
    response = await client.post(
        "/moderation/scans/424242/visibility",
        data={"visibility": "restricted", "reason": "takedown", "notes": NOTES},
        headers=SAME_ORIGIN,
    )
    expected: dict[str, Any] = {**FORM_EXPECTED, "moderator": 404, "admin": 404}
    assert response.status_code == expected[kind]


def moderation_form_paths() -> list[str]:
    """Every mutating moderation route of the app, its path parameters filled with subjects that do not exist: the
    matrix below covers a route added later without anyone listing it."""
    from app.main import app

    paths = []
    for route in app.routes:
        path = getattr(route, "path", "")
        if path.startswith("/moderation/") and "POST" in (getattr(route, "methods", None) or ()):
            filled = path
            for name, convertor in route.param_convertors.items():  # type: ignore[attr-defined]
                value = "424242" if type(convertor).__name__ == "IntegerConvertor" else "nobody"
                filled = re.sub(r"\{" + name + r"(:[a-z]+)?\}", value, filled)
            paths.append(filled)
    return sorted(paths)


def test_the_matrix_sees_every_mutating_moderation_route() -> None:
    paths = moderation_form_paths()
    assert "/moderation/accounts/nobody/statements" in paths
    assert "/moderation/webhooks/424242" in paths
    assert len(paths) >= 7


@pytest.mark.parametrize("kind", ["anonymous", "member", "reviewer", "suspended moderator"])
async def test_every_mutating_moderation_route_refuses_non_moderators(client: httpx.AsyncClient, kind: str) -> None:
    await act_as(client, await visitor(kind))
    for path in moderation_form_paths():
        response = await client.post(path, data={"reason": "abuse", "notes": NOTES}, headers=SAME_ORIGIN)
        assert response.status_code == FORM_EXPECTED[kind], path
    assert await audit_count() == 0
