"""Repository metric recalculation (docs/domain.md §1.7) and the pending → listed promotion."""

from __future__ import annotations

from typing import Any

from app.kernel import db
from app.registry.metrics import recalculate_repository_metrics
from app.registry.models import Repository
from app.reports.finding_memory import pattern_key
from app.reports.service import submit_report
from tests import factories
from tests.reports.support import COMMIT, finding, reach_quorum, report_body
from tests.sql import execute, rows


async def repository_row(repo: Repository) -> dict[str, Any]:
    [row] = await rows("SELECT * FROM repositories WHERE id = :id", id=repo.id)
    return row


async def set_visibility(scan_id: int, visibility: str) -> None:
    await execute("UPDATE scans SET visibility = :v WHERE id = :id", v=visibility, id=scan_id)


async def test_metrics_follow_reports_visibility_and_status() -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    assert (await repository_row(repo))["status"] == "unscanned"
    first = await submit_report(
        account, repo.host, repo.owner, repo.name, report_body(findings=[finding(), finding(title="XSS in template")])
    )
    row = await repository_row(repo)
    assert (row["scan_count"], row["open_findings_count"], row["verified_findings_count"], row["status"]) == (
        1,
        2,
        0,
        "findings",
    )
    assert row["last_scanned_at"] is not None
    await reach_quorum(first["findings"][0]["canonical_public_id"], "confirmed")
    row = await repository_row(repo)
    assert (row["open_findings_count"], row["verified_findings_count"]) == (2, 1)  # verified is still not fixed
    # public_summary still counts for metrics; restricted does not
    await set_visibility(int(first["id"]), "public_summary")
    async with db.transaction() as session:
        assert await recalculate_repository_metrics(session, repo.id) == ("listed", "listed")
    assert (await repository_row(repo))["scan_count"] == 1
    await set_visibility(int(first["id"]), "restricted")
    async with db.transaction() as session:
        await recalculate_repository_metrics(session, repo.id)
    row = await repository_row(repo)
    assert (row["scan_count"], row["open_findings_count"], row["verified_findings_count"], row["status"]) == (
        0,
        0,
        0,
        "unscanned",
    )
    assert row["last_scanned_at"] is None


async def test_status_reviewed_when_everything_is_fixed() -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    result = await submit_report(account, repo.host, repo.owner, repo.name, report_body())
    await reach_quorum(
        result["findings"][0]["canonical_public_id"], "fixed", platform_role="moderator", trust_tier="new"
    )
    row = await repository_row(repo)
    assert (row["open_findings_count"], row["status"]) == (0, "reviewed")
    empty = await factories.create_repository()
    await submit_report(account, empty.host, empty.owner, empty.name, report_body(findings=[]))
    assert (await repository_row(empty))["status"] == "reviewed"


async def test_pending_repository_is_listed_by_its_first_public_report() -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository(listing_status="pending")
    # a public occurrence of another pattern, stored before (rows only, no metrics yet): the listing flip must
    # mark its key too, not only the new report's
    await factories.create_instance(repo, account, "Open redirect after login")
    before = (await repository_row(repo))["updated_at"]
    await submit_report(account, repo.host, repo.owner, repo.name, report_body())
    row = await repository_row(repo)
    assert (row["listing_status"], row["scan_count"]) == ("listed", 2)
    assert row["updated_at"] > before
    dirty = {
        r["pattern_key"]: r["reason"] for r in await rows("SELECT pattern_key, reason FROM infestation_dirty_keys")
    }
    assert dirty == {
        pattern_key("SQL injection in login"): "assimilate",
        pattern_key("Open redirect after login"): "listing_change",
    }


async def test_recalculation_without_change_does_not_touch_the_row() -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository(listing_status="pending")
    await submit_report(account, repo.host, repo.owner, repo.name, report_body())
    before = await repository_row(repo)
    async with db.transaction() as session:
        assert await recalculate_repository_metrics(session, repo.id) == ("listed", "listed")
    assert (await repository_row(repo))["updated_at"] == before["updated_at"]
    quarantined = await factories.create_repository(listing_status="quarantined")
    async with db.transaction() as session:
        assert await recalculate_repository_metrics(session, quarantined.id) == ("quarantined", "quarantined")


COUNTS = ("scan_count", "last_scanned_at", "open_findings_count", "verified_findings_count", "status")


async def counts_hold_from_source(repo: Repository) -> tuple[Any, ...]:
    """The repository's stored counts, after checking that a recount from source leaves every one as it is."""
    before = await repository_row(repo)
    async with db.transaction() as session:
        await recalculate_repository_metrics(session, repo.id)
    after = await repository_row(repo)
    assert [before[k] for k in COUNTS] == [after[k] for k in COUNTS]
    return tuple(after[k] for k in COUNTS if k != "last_scanned_at")


async def test_a_report_that_moves_no_status_counts_itself_as_a_recount_from_source_would() -> None:
    """The common report moves the counts by itself alone (`COUNT_NEW_REPORT`); after each report of every shape,
    a recount from source finds nothing to change."""
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    sql, xss, leak = (
        finding(),
        finding(title="XSS in template"),
        finding(title="Token leak in logs", line_start=40, line_end=41),
    )

    async def report(findings: list[dict[str, Any]], sha: str) -> dict[str, Any]:
        return await submit_report(account, repo.host, repo.owner, repo.name, report_body(findings, commit_sha=sha))

    first = await report([sql, xss], "f" * 40)
    assert await counts_hold_from_source(repo) == (1, 2, 0, "findings")
    second = await report([sql, xss, sql], "b" * 40)  # known canonicals, one of them twice
    assert await counts_hold_from_source(repo) == (2, 2, 0, "findings")
    assert await report([], "c" * 40)
    assert await counts_hold_from_source(repo) == (3, 2, 0, "findings")
    # the canonicals' only visible reports restricted (a recount from source follows the moderator's change)
    for scan in (first, second):
        await set_visibility(int(scan["id"]), "restricted")
    async with db.transaction() as session:
        await recalculate_repository_metrics(session, repo.id)
    assert await counts_hold_from_source(repo) == (1, 0, 0, "reviewed")
    # a new report of a canonical no visible report carries counts it again, beside a new one
    await report([xss, leak], COMMIT)  # the reviewers' checks below are at COMMIT
    assert await counts_hold_from_source(repo) == (2, 2, 0, "findings")
    # a verified canonical: its report moved a status, so it is counted from source
    await reach_quorum(first["findings"][1]["canonical_public_id"], "confirmed")
    assert await counts_hold_from_source(repo) == (2, 2, 1, "findings")
    await report([xss], "e" * 40)  # seen at a new commit: the checks at COMMIT no longer hold it verified
    assert await counts_hold_from_source(repo) == (3, 2, 0, "findings")
