"""Who may record a check and what a check needs (docs/domain.md §1.5), and report-level confirmations: the copy onto
canonical checks, report verification, and the automatic flip of an accepted report to contested."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from app.accounts.models import Account
from app.kernel import db
from app.kernel.errors import Forbidden, NotFound, ValidationError
from app.registry.models import Repository
from app.reports.checks import record_check, record_confirmation
from app.reports.finding_memory import pattern_key
from app.reports.service import submit_report
from tests import factories
from tests.reports.support import (
    COMMIT,
    DROP,
    NOTES,
    check_body,
    finding,
    reach_quorum,
    report_body,
    reviewer,
    row_counts,
)
from tests.sql import execute, rows

SHA_A, SHA_B = COMMIT, "b" * 40


async def report(
    submitter: Account, repo: Repository, findings: list[dict[str, Any]] | None = None, commit_sha: str = SHA_A
) -> dict[str, Any]:
    return await submit_report(
        submitter, repo.host, repo.owner, repo.name, report_body(findings=findings, commit_sha=commit_sha)
    )


async def checks_count() -> int:
    return (await row_counts())["canonical_finding_checks"]


async def test_who_may_check() -> None:
    repo = await factories.create_repository()
    canonical = (await report(await factories.create_account(state="active"), repo))["findings"][0][
        "canonical_public_id"
    ]
    for account in (
        await factories.create_account(state="active", trust_tier="contributor"),
        await reviewer(state="restricted"),
        await reviewer(state="suspended"),
    ):
        with pytest.raises(Forbidden):
            await record_check(account, canonical, check_body())
    with pytest.raises(Forbidden) as info:
        await record_check(await reviewer(), canonical, check_body(), scopes=frozenset({"findings:submit"}))
    assert "token" in info.value.errors
    assert await checks_count() == 0
    await record_check(await reviewer(state="probation"), canonical, check_body())
    await record_check(
        await factories.create_account(platform_role="admin"),
        canonical,
        check_body(),
        scopes=frozenset({"reviews:verify"}),
    )
    assert await checks_count() == 2


async def test_conflict_of_interest_duplicates_and_missing_commits() -> None:
    repo = await factories.create_repository()
    author = await reviewer()
    canonical = (await report(author, repo))["findings"][0]["canonical_public_id"]
    with pytest.raises(Forbidden) as info:
        await record_check(author, canonical, check_body())
    assert "conflict of interest" in info.value.errors["account"][0]
    checker = await reviewer()
    await record_check(checker, canonical, check_body())
    with pytest.raises(ValidationError) as dup:
        await record_check(checker, canonical, check_body(verdict="disputed"))
    assert dup.value.errors == {"commit_sha": ["you already checked this finding at this commit"]}
    with pytest.raises(ValidationError) as missing:
        await record_check(await reviewer(), canonical, check_body(commit_sha=SHA_B))
    assert "not found" in missing.value.errors["commit_sha"][0]
    # an occurrence in a restricted report does not make the commit checkable
    restricted = await report(await factories.create_account(state="active"), repo, commit_sha=SHA_B)
    await execute("UPDATE scans SET visibility = 'restricted' WHERE id = :id", id=restricted["id"])
    with pytest.raises(ValidationError):
        await record_check(await reviewer(), canonical, check_body(commit_sha=SHA_B))
    assert await checks_count() == 1


async def test_bad_check_bodies_write_nothing() -> None:
    repo = await factories.create_repository()
    canonical = (await report(await factories.create_account(state="active"), repo))["findings"][0][
        "canonical_public_id"
    ]
    account = await reviewer()
    cases: list[tuple[dict[str, Any], str]] = [
        (check_body(notes="too short"), "notes"),
        (check_body(verdict="approve"), "verdict"),
        (check_body(commit_sha="abc"), "commit_sha"),
        (check_body(evidence="token: ghp_" + "A" * 36), "evidence"),
        (check_body(notes="the key AKIAIOSFODNN7EXAMPLE still works"), "notes"),
    ]
    for body, field in cases:
        with pytest.raises(ValidationError) as info:
            await record_check(account, canonical, body)
        assert field in info.value.errors
        assert "AKIA" not in str(info.value.errors) and "ghp_" not in str(info.value.errors)
    assert await checks_count() == 0


async def test_repository_gates_for_checks() -> None:
    repo = await factories.create_repository()
    canonical = (await report(await factories.create_account(state="active"), repo))["findings"][0][
        "canonical_public_id"
    ]
    await execute("UPDATE repositories SET participation_mode = 'paused' WHERE id = :id", id=repo.id)
    with pytest.raises(Forbidden):
        await record_check(await reviewer(), canonical, check_body())
    await record_check(await factories.create_account(platform_role="moderator"), canonical, check_body())
    await execute("UPDATE repositories SET listing_status = 'quarantined' WHERE id = :id", id=repo.id)
    with pytest.raises(NotFound):
        await record_check(await reviewer(), canonical, check_body())
    with pytest.raises(NotFound):
        await record_check(await reviewer(), "00000000-0000-0000-0000-000000000000", check_body())


async def test_check_updates_metrics_and_marks_its_key() -> None:
    repo = await factories.create_repository()
    canonical = (await report(await factories.create_account(state="active"), repo))["findings"][0][
        "canonical_public_id"
    ]
    await execute("DELETE FROM infestation_dirty_keys")
    await record_check(await reviewer(), canonical, check_body(), client_ip="192.0.2.1")
    await record_check(await reviewer(), canonical, check_body(), client_ip="192.0.2.2")
    async with db.read_session(replica=False) as session:
        repo_row = (
            await session.execute(
                text("SELECT open_findings_count, verified_findings_count, status FROM repositories WHERE id = :id"),
                {"id": repo.id},
            )
        ).one()
        dirty = (await session.execute(text("SELECT pattern_key, reason FROM infestation_dirty_keys"))).all()
        hashes = (await session.execute(text("SELECT client_ip_hash FROM canonical_finding_checks"))).scalars().all()
        report_verified = (await session.execute(text("SELECT verified_at FROM scans"))).scalar_one()
    assert tuple(repo_row) == (1, 1, "findings")
    assert [tuple(d) for d in dirty] == [(pattern_key("SQL injection in login"), "status")]
    assert all(isinstance(h, bytes) and len(h) == 32 for h in hashes) and hashes[0] != hashes[1]
    assert b"192.0.2.1" not in hashes[0]
    assert report_verified is not None  # its only canonical met quorum at the report's commit


async def test_confirmation_copies_onto_checks_and_verifies_the_report() -> None:
    repo = await factories.create_repository()
    submitter = await factories.create_account(state="active")
    result = await report(submitter, repo, [finding(), finding(title="XSS in template")])
    scan_id = int(result["id"])
    first = await record_confirmation(
        await reviewer(), scan_id, {"verdict": "confirmed", "provenance": "human", "notes": NOTES}
    )
    assert first["checks_recorded"] == 2 and not first["verified"]
    second = await record_confirmation(
        await reviewer(), scan_id, {"verdict": "confirmed", "provenance": "human", "notes": NOTES}
    )
    assert (second["verified"], second["confirmations_count"]) == (True, 2)
    async with db.read_session(replica=False) as session:
        statuses = (await session.execute(text("SELECT status FROM canonical_findings"))).scalars().all()
        linked = (
            await session.execute(
                text("SELECT count(*) FROM canonical_finding_checks WHERE scan_finding_id IS NOT NULL")
            )
        ).scalar_one()
    assert statuses == ["verified", "verified"]
    assert linked == 4
    with pytest.raises(Forbidden):
        await record_confirmation(submitter, scan_id, {"verdict": "confirmed", "notes": NOTES})
    with pytest.raises(NotFound):
        await record_confirmation(await reviewer(), scan_id + 1000, {"verdict": "confirmed", "notes": NOTES})


async def test_confirmation_is_unique_and_insert_or_ignore() -> None:
    repo = await factories.create_repository()
    result = await report(
        await factories.create_account(state="active"), repo, [finding(), finding(title="XSS in template")]
    )
    account = await reviewer()
    await record_check(account, result["findings"][0]["canonical_public_id"], check_body())
    body = {"verdict": "disputed", "provenance": "human", "notes": NOTES}
    recorded = await record_confirmation(account, int(result["id"]), body)
    assert recorded["checks_recorded"] == 1  # the existing check at this commit is kept as it was
    with pytest.raises(ValidationError) as info:
        await record_confirmation(account, int(result["id"]), body)
    assert info.value.errors == {"scan": ["you already recorded a verdict on this report"]}
    async with db.read_session(replica=False) as session:
        verdicts = (
            await session.execute(text("SELECT verdict FROM canonical_finding_checks ORDER BY canonical_finding_id"))
        ).scalars()
        assert list(verdicts) == ["confirmed", "disputed"]
    with pytest.raises(ValidationError):
        await record_confirmation(await reviewer(), int(result["id"]), {"verdict": "fixed", "notes": NOTES})


async def test_confirmation_skips_canonicals_the_confirmer_reported() -> None:
    repo = await factories.create_repository()
    account = await reviewer()
    await report(account, repo, [finding()])  # the confirmer reported the first finding at this commit
    other = await report(await factories.create_account(state="active"), repo, [finding(), finding(title="XSS")])
    recorded = await record_confirmation(account, int(other["id"]), {"verdict": "confirmed", "notes": NOTES})
    assert recorded["checks_recorded"] == 1


async def test_report_without_findings_is_verified_by_its_confirmations() -> None:
    repo = await factories.create_repository()
    scan_id = int((await report(await factories.create_account(state="active"), repo, []))["id"])
    await record_confirmation(
        await reviewer(), scan_id, {"verdict": "confirmed", "provenance": "human", "notes": NOTES}
    )
    agent = await record_confirmation(await reviewer(), scan_id, {"verdict": "confirmed", "notes": NOTES})
    assert not agent["verified"]  # the API default provenance is agent: it does not count
    human = await record_confirmation(
        await reviewer(), scan_id, {"verdict": "confirmed", "provenance": "hybrid", "notes": NOTES}
    )
    assert human["verified"]


async def test_losing_quorum_contests_an_accepted_report() -> None:
    repo = await factories.create_repository()
    result = await report(await factories.create_account(state="active"), repo)
    scan_id = int(result["id"])
    canonical = result["findings"][0]["canonical_public_id"]
    await reach_quorum(canonical, "confirmed")
    await execute(
        "UPDATE scans SET review_status = 'accepted', moderation_reason = 'verified',"
        " moderation_notes = 'Accepted after two independent checks.' WHERE id = :id",
        id=scan_id,
    )
    await record_check(await reviewer(), canonical, check_body(verdict="disputed"))
    [row] = await rows("SELECT review_status, moderation_reason, verified_at FROM scans WHERE id = :id", id=scan_id)
    assert tuple(row.values()) == ("contested", "verification_quorum_lost", None)


async def test_a_check_says_whether_it_counted_and_why_not() -> None:
    repo = await factories.create_repository()
    canonical = (await report(await factories.create_account(state="active"), repo))["findings"][0][
        "canonical_public_id"
    ]

    async def reason(account: Account, ip: str, **body: Any) -> str:
        sent = {k: v for k, v in check_body(**body).items() if v is not DROP}
        answer = await record_check(account, canonical, sent, client_ip=ip)
        assert answer["counted"] is False and answer["confirmations_count"] == 0, answer
        assert answer["reason"].startswith("recorded, not counted"), answer
        return str(answer["reason"])

    assert "provenance" in await reason(await reviewer(), "192.0.2.1", provenance=DROP)
    assert "probation" in await reason(await reviewer(state="probation"), "192.0.2.2")
    maintainer = await reviewer()
    await execute(
        "INSERT INTO repository_maintainers (repository_id, account_id) VALUES (:r, :a)", r=repo.id, a=maintainer.id
    )
    assert "maintainer" in await reason(maintainer, "192.0.2.3")
    # two reviewers from one address: the second learns why, and neither counts
    counted = await record_check(await reviewer(), canonical, check_body(), client_ip="192.0.2.4")
    assert (counted["counted"], counted["reason"], counted["confirmations_count"]) == (True, None, 1)
    assert "same address" in await reason(await reviewer(), "192.0.2.4")
    # a report at a newer commit: a check at the older one is kept, not counted
    await report(await factories.create_account(state="active"), repo, commit_sha=SHA_B)
    assert "commit" in await reason(await reviewer(), "192.0.2.5")
    fresh = await record_check(await reviewer(), canonical, check_body(commit_sha=SHA_B), client_ip="192.0.2.6")
    assert (fresh["counted"], fresh["reason"]) == (True, None)
