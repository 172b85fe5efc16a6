"""Moderation services: effect, one audit event with before → after, dirty keys, nothing written on bad input
or a forbidden actor, and the atlas following quarantine/restriction after a drain (no reconcile)."""

from __future__ import annotations

from typing import Any

import pytest

from app.accounts.models import Account
from app.infestations.dirty_queue import drain_all
from app.infestations.queries import list_infestations
from app.kernel import db
from app.kernel.errors import DomainError, Forbidden, NotFound, ValidationError
from app.moderation import account_actions, service
from app.record.outbox import mark_dirty
from app.registry.models import Repository
from app.reports.checks import record_check
from app.reports.finding_memory import pattern_key
from app.reports.models import Scan
from tests.moderation.support import NOTES, TITLE, make_account, two_repository_pattern
from tests.sql import execute, rows

KEY = pattern_key(TITLE)


async def audit_rows() -> list[dict[str, Any]]:
    return await rows("SELECT * FROM audit_events ORDER BY id")


async def dirty_keys() -> set[str]:
    return {r["pattern_key"] for r in await rows("SELECT pattern_key FROM infestation_dirty_keys")}


async def project(key: str) -> None:
    """The test fixtures bypass the write path: dirty their key and drain, as a submit would have."""
    async with db.transaction() as session:
        await mark_dirty(session, [key], "assimilate")
    await drain_all()


async def atlas_keys() -> set[str]:
    return {item["pattern_key"] for item in await list_infestations(days=30, min_repos=2)}


@pytest.fixture
async def projected(submitter: Account) -> tuple[list[Repository], list[Scan]]:
    """TITLE reported in two listed repositories, already on the atlas."""
    repos, scans = await two_repository_pattern(submitter)
    await project(KEY)
    assert KEY in await atlas_keys()
    return repos, scans


async def test_restricting_a_report_records_it_and_removes_it_from_the_atlas(
    moderator: Account, projected: tuple[list[Repository], list[Scan]]
) -> None:
    _repos, scans = projected

    outcome = await service.change_scan_visibility(moderator, scans[0].id, "restricted", "  takedown ", NOTES)

    scan = (await rows("SELECT * FROM scans WHERE id = :id", id=scans[0].id))[0]
    assert scan["visibility"] == "restricted"
    assert scan["moderation_reason"] == "takedown"
    assert scan["moderation_notes"] == NOTES
    assert scan["reviewed_by_id"] == moderator.id and scan["reviewed_at"] is not None
    [event] = await audit_rows()
    assert event["id"] == outcome.audit_event_id
    assert (event["actor_id"], event["action"], event["subject_type"], event["subject_id"]) == (
        moderator.id,
        "scan.visibility",
        "scan",
        str(scans[0].id),
    )
    assert (event["before"], event["after"]) == ({"visibility": "public"}, {"visibility": "restricted"})
    assert (event["reason"], event["notes"]) == ("takedown", NOTES)
    assert KEY in await dirty_keys()
    backlog = await service.pending_rollup_backlog()
    assert backlog["pending"] >= 1 and backlog["oldest_age_seconds"] is not None

    await drain_all()  # the worker's drain only: no reconcile
    assert KEY not in await atlas_keys()
    assert await service.pending_rollup_backlog() == {"pending": 0, "oldest_age_seconds": None}


async def test_quarantining_a_repository_removes_its_contribution_after_a_drain(
    moderator: Account, projected: tuple[list[Repository], list[Scan]]
) -> None:
    repos, _scans = projected

    repo = repos[1]
    await service.change_repository_listing(
        moderator, repo.host, repo.owner.upper(), repo.name, "quarantined", "malware", NOTES
    )

    stored = (await rows("SELECT listing_status FROM repositories WHERE id = :id", id=repo.id))[0]
    assert stored["listing_status"] == "quarantined"
    [event] = await audit_rows()
    assert event["subject_id"] == f"{repo.host}/{repo.owner}/{repo.name}"
    assert (event["before"], event["after"]) == ({"listing_status": "listed"}, {"listing_status": "quarantined"})
    # delist-safe discovery: found through the rollup membership although the repository is no longer listed
    assert KEY in await dirty_keys()
    await drain_all()
    assert KEY not in await atlas_keys()
    memberships = await rows("SELECT * FROM infestation_pattern_repos WHERE repository_id = :id", id=repo.id)
    assert memberships == []


async def test_publishing_a_restricted_report_again_brings_the_pattern_back(
    moderator: Account, projected: tuple[list[Repository], list[Scan]]
) -> None:
    _repos, scans = projected
    await service.change_scan_visibility(moderator, scans[0].id, "restricted", "takedown", NOTES)
    await drain_all()
    assert KEY not in await atlas_keys()
    await service.change_scan_visibility(moderator, scans[0].id, "public", "appeal upheld", NOTES)
    await drain_all()
    assert KEY in await atlas_keys()
    assert [e["after"] for e in await audit_rows()] == [{"visibility": "restricted"}, {"visibility": "public"}]


async def test_invalid_input_names_each_field_and_writes_nothing(moderator: Account, submitter: Account) -> None:
    _repos, scans = await two_repository_pattern(submitter)
    with pytest.raises(ValidationError) as caught:
        await service.change_scan_visibility(moderator, scans[0].id, "private", " ab ", "too short")
    assert set(caught.value.errors) == {"visibility", "reason", "notes"}
    assert "3 to 100" in caught.value.errors["reason"][0]
    assert "20 to 4000" in caught.value.errors["notes"][0]
    with pytest.raises(ValidationError):
        await service.change_scan_visibility(moderator, scans[0].id, "restricted", "x" * 101, NOTES)
    with pytest.raises(ValidationError):
        await service.change_scan_visibility(moderator, scans[0].id, "restricted", "spam", "n" * 4001)
    assert await audit_rows() == []
    assert await dirty_keys() == set()
    assert (await rows("SELECT visibility FROM scans WHERE id = :id", id=scans[0].id))[0]["visibility"] == "public"


async def test_a_change_to_the_current_value_is_refused(moderator: Account, submitter: Account) -> None:
    repos, scans = await two_repository_pattern(submitter)
    with pytest.raises(ValidationError) as caught:
        await service.change_scan_visibility(moderator, scans[0].id, "public", "nothing", NOTES)
    assert caught.value.errors == {"visibility": ["is already public"]}
    with pytest.raises(ValidationError) as caught:
        await service.change_repository_listing(
            moderator, repos[0].host, repos[0].owner, repos[0].name, "listed", "nothing", NOTES
        )
    assert caught.value.errors == {"listing_status": ["is already listed"]}
    assert await audit_rows() == []


@pytest.mark.parametrize(
    ("role", "tier", "state"),
    [
        ("member", "new", "active"),
        ("member", "reviewer", "active"),
        ("moderator", "new", "suspended"),
        ("admin", "new", "banned"),
        ("moderator", "new", "restricted"),
    ],
)
async def test_actors_without_moderation_rights_are_forbidden(
    submitter: Account, role: str, tier: str, state: str
) -> None:
    actor = await make_account("actor", platform_role=role, trust_tier=tier, state=state)
    repos, scans = await two_repository_pattern(submitter)
    target = await make_account("target")
    with pytest.raises(Forbidden):
        await service.change_scan_visibility(actor, scans[0].id, "restricted", "takedown", NOTES)
    with pytest.raises(Forbidden):
        await service.change_repository_listing(
            actor, repos[0].host, repos[0].owner, repos[0].name, "quarantined", "takedown", NOTES
        )
    with pytest.raises(Forbidden):
        await account_actions.change_account(actor, target.handle, state="suspended", reason="abuse", notes=NOTES)
    assert await audit_rows() == []
    assert await dirty_keys() == set()


async def test_a_moderator_suspended_after_loading_cannot_act(moderator: Account, submitter: Account) -> None:
    _repos, scans = await two_repository_pattern(submitter)
    await execute("UPDATE accounts SET state = 'suspended' WHERE id = :id", id=moderator.id)
    with pytest.raises(Forbidden):
        await service.change_scan_visibility(moderator, scans[0].id, "restricted", "takedown", NOTES)
    assert await audit_rows() == []


async def test_submitters_cannot_moderate_their_own_report(moderator: Account) -> None:
    _repos, scans = await two_repository_pattern(moderator)
    with pytest.raises(Forbidden) as caught:
        await service.change_scan_visibility(moderator, scans[0].id, "restricted", "takedown", NOTES)
    assert "you submitted" in str(caught.value)


async def test_unknown_subjects_are_not_found(moderator: Account) -> None:
    with pytest.raises(NotFound):
        await service.change_scan_visibility(moderator, 999, "restricted", "takedown", NOTES)
    with pytest.raises(NotFound):
        await service.change_repository_listing(moderator, "github.com", "no", "such", "listed", "x" * 3, NOTES)
    with pytest.raises(NotFound):
        await account_actions.change_account(moderator, "nobody", state="active", reason="abc", notes=NOTES)


async def test_account_changes_follow_the_admin_and_self_rules(moderator: Account) -> None:
    admin = await make_account("chief", platform_role="admin")
    member = await make_account("member")

    async def refused(actor: Account, handle: str, **change: str) -> DomainError:
        with pytest.raises(DomainError) as caught:
            await account_actions.change_account(actor, handle, reason="policy", notes=NOTES, **change)
        return caught.value

    assert isinstance(await refused(moderator, member.handle, platform_role="admin"), Forbidden)
    assert isinstance(await refused(moderator, admin.handle, state="suspended"), Forbidden)
    assert isinstance(await refused(moderator, moderator.handle, state="active"), Forbidden)
    assert isinstance(await refused(admin, admin.handle, platform_role="member"), Forbidden)
    no_change = await refused(moderator, member.handle, platform_role="member", state="active")
    assert no_change.errors == {"platform_role": ["is already member"], "state": ["is already active"]}
    nothing = await refused(moderator, member.handle)
    assert "base" in nothing.errors
    assert await audit_rows() == []

    await account_actions.change_account(admin, member.handle, platform_role="moderator", reason="promote", notes=NOTES)
    await account_actions.change_account(
        admin, member.handle, platform_role="admin", state="active", reason="promote", notes=NOTES
    )
    events = await audit_rows()
    assert [(e["actor_id"], e["before"], e["after"]) for e in events] == [
        (admin.id, {"platform_role": "member"}, {"platform_role": "moderator"}),
        (admin.id, {"platform_role": "moderator"}, {"platform_role": "admin"}),
    ]
    stored = (await rows("SELECT platform_role, state FROM accounts WHERE id = :id", id=member.id))[0]
    assert stored == {"platform_role": "admin", "state": "active"}


async def test_only_admins_change_roles_while_moderators_still_change_states(moderator: Account) -> None:
    member = await make_account("member")
    second = await make_account("second", platform_role="moderator")
    for target, role in ((member, "moderator"), (second, "member"), (member, "admin")):
        with pytest.raises(Forbidden) as caught:
            await account_actions.change_account(
                moderator, target.handle, platform_role=role, reason="promote", notes=NOTES
            )
        assert list(caught.value.errors) == ["platform_role"]
    assert await audit_rows() == []
    stored = await rows("SELECT handle, platform_role FROM accounts WHERE id IN (:a, :b) ORDER BY handle",
                        a=member.id, b=second.id)  # fmt: skip
    assert [(r["handle"], r["platform_role"]) for r in stored] == [("member", "member"), ("second", "moderator")]
    # the console posts the current role with a state change: that is a state change, allowed to moderators
    await account_actions.change_account(
        moderator, member.handle, platform_role="member", state="restricted", reason="abuse", notes=NOTES
    )
    assert [(e["before"], e["after"]) for e in await audit_rows()] == [({"state": "active"}, {"state": "restricted"})]
    # an admin who is no longer in good standing cannot change roles either
    fallen = await make_account("fallen", platform_role="admin", state="restricted")
    with pytest.raises(Forbidden):
        await account_actions.change_account(
            fallen, member.handle, platform_role="moderator", reason="promote", notes=NOTES
        )


async def test_only_admins_change_the_state_of_a_moderator_or_admin_account(moderator: Account) -> None:
    admin = await make_account("chief", platform_role="admin")
    rogue = await make_account("rogue", platform_role="moderator")
    await account_actions.change_account(admin, rogue.handle, state="banned", reason="rogue", notes=NOTES)
    before = await audit_rows()
    for target, state in ((rogue, "active"), (rogue, "probation"), (admin, "suspended")):
        with pytest.raises(Forbidden) as caught:
            await account_actions.change_account(moderator, target.handle, state=state, reason="undo", notes=NOTES)
        assert caught.value.errors == {
            "state": [f"only admins may change the state of a {target.platform_role} account"]
        }
    assert await audit_rows() == before
    assert (await rows("SELECT state FROM accounts WHERE id = :id", id=rogue.id))[0]["state"] == "banned"
    await account_actions.change_account(admin, rogue.handle, state="active", reason="appeal", notes=NOTES)
    assert (await rows("SELECT state FROM accounts WHERE id = :id", id=rogue.id))[0]["state"] == "active"


async def test_suspending_an_account_logs_it_out_everywhere(moderator: Account) -> None:
    from app.accounts.sessions import load_session, open_session

    member = await make_account("member")
    token = await open_session(member.id)
    assert await load_session(token) is not None
    await account_actions.change_account(moderator, member.handle, state="suspended", reason="abuse", notes=NOTES)
    assert await load_session(token) is None


async def test_authority_revalidation_recomputes_statuses_of_checked_repositories(
    moderator: Account, submitter: Account
) -> None:
    reviewers = [await make_account(f"reviewer{i}", trust_tier="reviewer") for i in range(2)]
    repos, _scans = await two_repository_pattern(submitter)
    canonical = (
        await rows(
            "SELECT public_id, last_seen_commit_sha FROM canonical_findings WHERE repository_id = :id",
            id=repos[0].id,
        )
    )[0]
    for reviewer in reviewers:
        await record_check(
            reviewer,
            str(canonical["public_id"]),
            {
                "commit_sha": canonical["last_seen_commit_sha"],
                "verdict": "confirmed",
                "provenance": "human",
                "notes": "Reproduced the injection with a crafted username.",
            },
        )
    status = "SELECT status FROM canonical_findings WHERE public_id = :p"
    assert (await rows(status, p=canonical["public_id"]))[0]["status"] == "verified"
    await execute("DELETE FROM infestation_dirty_keys")

    await account_actions.change_account(
        moderator, reviewers[0].handle, state="suspended", reason="sockpuppet", notes=NOTES
    )

    # the suspended reviewer's check no longer counts: quorum lost, and the atlas is told
    assert (await rows(status, p=canonical["public_id"]))[0]["status"] == "open"
    assert pattern_key(TITLE) in await dirty_keys()
