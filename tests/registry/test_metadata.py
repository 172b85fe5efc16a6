"""The forge's record of a repository (app/registry/metadata.py): looked up at registration (API and CLI), by the
worker while pending, refreshed daily with its ETag, and the `forge_missing` quarantine. The forge is the loopback
one (tests/conftest.py `forge`)."""

from __future__ import annotations

import json

import httpx
import pytest
from sqlalchemy import select

from app.cli import build_parser
from app.forge.demo import DemoForge
from app.kernel import db
from app.kernel.audit import AuditEvent
from app.kernel.errors import ValidationError
from app.kernel.quotas import DailyQuota
from app.moderation.service import change_repository_listing
from app.registry import metadata
from app.registry.models import Repository
from jobs import worker
from tests import factories
from tests.moderation.support import NOTES, act_as, make_account
from tests.registry.test_registry_api import bearer, post

WIDGET = {"host": "github.com", "owner": "acme", "name": "widget"}


@pytest.fixture
def gate(forge: DemoForge, monkeypatch: pytest.MonkeyPatch) -> DemoForge:
    monkeypatch.setenv("EVIDENCE_CHECK", "gate")
    monkeypatch.setenv("FORGE_BUDGET_SECONDS", "1")
    forge.add_repository("github.com", "acme", "widget", default_branch="trunk", forge_id=4242,
                         description="Widgets, tested", language="Rust", stars=17)  # fmt: skip
    return forge


async def stored(name: str = "widget") -> Repository:
    async with db.read_session(replica=False) as session:
        return (await session.execute(select(Repository).where(Repository.name == name))).scalar_one()


async def test_registration_stores_what_the_forge_says_and_the_page_shows_it(
    client: httpx.AsyncClient, gate: DemoForge
) -> None:
    created = await post(client, WIDGET, await bearer("repositories:write"))
    assert created.status_code == 201, created.text
    body = created.json()
    assert (body["metadata"], body["default_branch"], body["primary_language"]) == ("found", "trunk", "Rust")
    assert (body["description"], body["stars_count"]) == ("Widgets, tested", 17)
    repo = await stored()
    assert (repo.forge_id, repo.metadata_state, repo.metadata_checked_at is not None) == ("4242", "found", True)
    assert repo.metadata_etag
    twin = (await client.get("/repos/github.com/acme/widget.json")).json()["repository"]
    assert (twin["default_branch"], twin["metadata"], twin["stars_count"]) == ("trunk", "found", 17)
    page = (await client.get("/repos/github.com/acme/widget")).text
    assert "Widgets, tested" in page and "default branch <code>trunk</code>" in page and "Rust" in page


async def test_a_name_the_forge_does_not_have_is_refused_and_nothing_stored(
    client: httpx.AsyncClient, gate: DemoForge
) -> None:
    gate.add_repository("github.com", "acme", "secret", private=True)
    headers = await bearer("repositories:write")
    for name in ("nothing", "secret"):  # a private repository answers the same
        refused = await post(client, {**WIDGET, "name": name}, headers)
        assert refused.status_code == 422, refused.text
        assert refused.json()["errors"] == {"name": ["not found on github.com"]}
    async with db.read_session(replica=False) as session:
        assert (await session.execute(select(Repository.id))).all() == []


async def test_a_failing_forge_leaves_it_pending_until_the_worker_finds_it(
    client: httpx.AsyncClient, gate: DemoForge
) -> None:
    gate.fail("github.com", 503)
    created = await post(client, WIDGET, await bearer("repositories:write"))
    assert created.status_code == 201, created.text
    assert (created.json()["metadata"], created.json()["default_branch"]) == ("pending", None)
    assert "looking it up on github.com" in (await client.get("/repos/github.com/acme/widget")).text
    assert await metadata.look_up_pending() == {"failed": 1}
    gate.up()
    assert await metadata.look_up_pending() == {}  # asked a moment ago: retried after PENDING_RETRY
    async with db.transaction() as session:
        repo = (await session.execute(select(Repository))).scalar_one()
        repo.metadata_checked_at = None
    ctx = {"worker_id": "w", "job_id": "cron:metadata", "job_try": 1}
    assert await worker.metadata_pending_job(ctx, slot="2026-12-02T07:05:00+00:00") is True  # the worker's job
    repo = await stored()
    assert (repo.metadata_state, repo.default_branch, repo.stars_count) == ("found", "trunk", 17)
    assert (await client.get("/repos/github.com/acme/widget.json")).json()["repository"]["metadata"] == "found"


async def test_the_cli_registers_through_the_same_lookup(
    gate: DemoForge, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    args = build_parser().parse_args(["repos", "add", "github.com/acme/widget"])
    assert await args.handler(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["metadata"], printed["default_branch"], printed["created"]) == ("found", "trunk", True)
    args = build_parser().parse_args(["repos", "add", "github.com/acme/nothing"])
    with pytest.raises(ValidationError) as refused:
        await args.handler(args)
    assert refused.value.errors == {"name": ["not found on github.com"]}
    monkeypatch.setenv("EVIDENCE_CHECK", "off")  # the gate off: no request, as before the gate existed
    asked = len(gate.requests())
    args = build_parser().parse_args(["repos", "add", "github.com/acme/nothing"])
    assert await args.handler(args) == 0
    assert json.loads(capsys.readouterr().out)["metadata"] == "unchecked"
    assert len(gate.requests()) == asked


async def test_the_daily_refresh_asks_with_the_etag_and_a_304_changes_nothing(
    client: httpx.AsyncClient, gate: DemoForge
) -> None:
    assert (await post(client, WIDGET, await bearer("repositories:write"))).status_code == 201
    first = await stored()
    assert await metadata.refresh_listed() == {"not_modified": 1}
    conditional = gate.requests("github.com", "/repos/acme/widget")[-1]
    assert conditional.headers["if-none-match"] == first.metadata_etag
    again = await stored()
    assert again.metadata_checked_at is not None and first.metadata_checked_at is not None
    assert again.metadata_checked_at > first.metadata_checked_at and again.stars_count == 17
    gate.repo("github.com", "acme", "widget").stars = 18  # a changed record: a new ETag, stored
    assert await metadata.refresh_listed() == {"found": 1}
    assert (await stored()).stars_count == 18


async def quarantine_events() -> list[AuditEvent]:
    async with db.read_session(replica=False) as session:
        return list((await session.execute(select(AuditEvent).where(AuditEvent.reason == "forge_missing"))).scalars())


async def test_two_missing_runs_quarantine_as_a_takedown_by_the_registry(
    client: httpx.AsyncClient, gate: DemoForge
) -> None:
    assert (await post(client, WIDGET, await bearer("repositories:write"))).status_code == 201
    del gate.repos[("github.com", "acme", "widget")]
    assert await metadata.refresh_listed() == {"missing": 1}
    assert ((await stored()).listing_status, (await stored()).forge_missing_runs) == ("listed", 1)
    assert (await client.get("/repos/github.com/acme/widget")).status_code == 200
    assert await metadata.refresh_listed() == {"quarantined": 1}
    assert (await stored()).listing_status == "quarantined"
    [event] = await quarantine_events()
    assert (event.action, event.actor_id, event.subject_id) == ("repository.listing", None, "github.com/acme/widget")
    assert (event.before, event.after) == ({"listing_status": "listed"}, {"listing_status": "quarantined"})
    assert (await client.get("/repos/github.com/acme/widget")).status_code == 404
    assert (await client.get("/repos/github.com/acme/widget.json")).status_code == 404
    assert await metadata.refresh_listed() == {}  # no longer listed: no longer asked
    moderator = await make_account("mod", platform_role="moderator")
    await act_as(client, moderator)
    audit = (await client.get(f"/moderation/audit/{event.id}")).text
    assert "the registry" in audit and "forge_missing" in audit


async def test_a_found_answer_between_two_missing_ones_resets_the_count(
    client: httpx.AsyncClient, gate: DemoForge
) -> None:
    assert (await post(client, WIDGET, await bearer("repositories:write"))).status_code == 201
    widget = gate.repos.pop(("github.com", "acme", "widget"))
    assert await metadata.refresh_listed() == {"missing": 1}
    gate.repos[("github.com", "acme", "widget")] = widget
    assert await metadata.refresh_listed() == {"not_modified": 1}  # still there, unchanged
    del gate.repos[("github.com", "acme", "widget")]
    assert await metadata.refresh_listed() == {"missing": 1}
    assert ((await stored()).listing_status, await quarantine_events()) == ("listed", [])


async def test_the_name_given_to_another_repository_quarantines_at_once(
    client: httpx.AsyncClient, gate: DemoForge
) -> None:
    assert (await post(client, WIDGET, await bearer("repositories:write"))).status_code == 201
    gate.add_repository("github.com", "acme", "widget", forge_id=9999)  # deleted, and the name taken again
    assert await metadata.refresh_listed() == {"quarantined": 1}
    repo = await stored()
    assert (repo.listing_status, repo.forge_id) == ("quarantined", "4242")
    [event] = await quarantine_events()
    assert "9999" in (event.notes or "")
    moderator = await make_account("mod", platform_role="moderator")
    await change_repository_listing(moderator, "github.com", "acme", "widget", "listed", "the new one is fine", NOTES)
    assert await metadata.refresh_listed() == {"found": 1}  # a moderator's listing takes the name as it is now
    repo = await stored()
    assert (repo.listing_status, repo.forge_id) == ("listed", "9999")


async def test_a_redirect_is_recorded_for_moderators_and_not_acted_on(
    client: httpx.AsyncClient, gate: DemoForge
) -> None:
    assert (await post(client, WIDGET, await bearer("repositories:write"))).status_code == 201
    gate.rename("github.com", "acme", "widget", "acme-labs", "widget2")
    assert await metadata.refresh_listed() == {"refused": 1}
    repo = await stored()
    assert (repo.forge_redirect, repo.listing_status, repo.forge_missing_runs) == ("acme-labs/widget2", "listed", 0)
    # a new registration of an old name is told the new one
    gate.add_repository("github.com", "acme", "gadget")
    gate.rename("github.com", "acme", "gadget", "acme", "gizmo")
    old_name = await post(client, {**WIDGET, "name": "gadget"}, await bearer("repositories:write"))
    assert old_name.status_code == 422, old_name.text
    assert old_name.json()["errors"] == {"name": ["github.com now calls it acme/gizmo: register that name"]}
    moderator = await make_account("mod", platform_role="moderator")
    await act_as(client, moderator)
    console = (await client.get("/moderation/repositories")).text
    assert "now acme-labs/widget2" in console
    assert (await client.get("/repos/github.com/acme/widget")).status_code == 200


async def test_the_gate_off_asks_nothing_and_stores_unchecked(client: httpx.AsyncClient, forge: DemoForge) -> None:
    await factories.create_repository("old", "one")
    created = await post(client, WIDGET, await bearer("repositories:write"))  # the suite's default: EVIDENCE_CHECK=off
    assert (created.status_code, created.json()["metadata"]) == (201, "unchecked")
    assert await metadata.refresh_listed() == {} and await metadata.look_up_pending() == {}
    assert forge.requests() == []


async def test_an_account_that_may_not_register_costs_the_forge_nothing(
    client: httpx.AsyncClient, gate: DemoForge, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.registry import service

    restricted = await bearer("repositories:write", state="restricted")
    assert (await post(client, WIDGET, restricted)).status_code == 403
    monkeypatch.setattr(service, "REGISTRATIONS_PER_DAY", DailyQuota("repository registrations", 1, 1, 1))
    member = await bearer("repositories:write")
    assert (await post(client, WIDGET, member)).status_code == 201
    assert (await post(client, {**WIDGET, "name": "nothing"}, member)).status_code == 429  # not a 422
    assert len(gate.requests()) == 1
