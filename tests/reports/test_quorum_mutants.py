"""The quorum rule at its edges and the exact words a reviewer reads when a check does not count (docs/domain.md
§1.5): the boundaries bench/mutation.py holds app/reports/quorum.py to."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from app.accounts.models import Account
from app.kernel import db
from app.reports.checks import record_check, record_confirmation
from app.reports.finding_memory import pattern_key
from app.reports.quorum import (
    NOT_COUNTED,
    THRESHOLD,
    Tally,
    meets_quorum,
    recompute_canonical_status,
    recompute_canonical_statuses,
    recompute_scan_verification,
    recompute_scans_at_commit,
    refresh_repository_checks,
    status_for,
    why_not_counted,
)
from app.reports.service import submit_report
from tests import factories
from tests.reports.support import COMMIT, DROP, NOTES, check_body, finding, report_body, reviewer
from tests.sql import execute, rows

RULE = [  # (confirmed, disputed, fixed) -> status
    ((0, 0, 0), "open"),
    ((1, 0, 0), "open"),
    ((2, 0, 0), "verified"),
    ((3, 1, 0), "verified"),
    ((3, 2, 0), "open"),  # C - D = 1
    ((2, 2, 0), "open"),  # a tie is open, not disputed
    ((1, 2, 0), "disputed"),
    ((0, 1, 0), "disputed"),
    ((0, 0, 1), "open"),
    ((0, 0, 2), "fixed"),
    ((0, 1, 2), "disputed"),  # F - D = 1
    ((0, 1, 3), "fixed"),
    ((5, 0, 2), "fixed"),  # fixed wins over verified
    ((3, 1, 2), "verified"),
    ((0, 3, 4), "disputed"),
]


def test_the_status_rule_at_its_edges() -> None:
    assert THRESHOLD == 2
    for (c, d, f), status in RULE:
        assert status_for(Tally(confirmed=c, disputed=d, fixed=f)) == status, (c, d, f)
        assert meets_quorum(Tally(confirmed=c, disputed=d, fixed=f)) is (status in ("verified", "fixed")), (c, d, f)


WHY = {
    "commit": NOT_COUNTED + "checks count only at the finding's latest commit ({sha}), and this commit is an older "
    "one (docs/domain.md §1.5)",
    "provenance": NOT_COUNTED + 'provenance is "agent" (the default), and only human or hybrid checks count; send '
    '"provenance": "human" when a person checked it (docs/domain.md §1.5)',
    "state": NOT_COUNTED + "your account's state is probation; only checks by active accounts count "
    "(docs/domain.md §1.5)",
    "tier": NOT_COUNTED + "your account is not a qualified reviewer (trust tier reviewer, or role moderator or "
    "admin) (docs/domain.md §1.5)",
    "maintainer": NOT_COUNTED + "you are or were a verified maintainer of this repository, and a maintainer's "
    "checks are recorded, never counted (docs/domain.md §1.5, §14)",
    "address": NOT_COUNTED + "another account checked this finding from the same address (IPv4 address or IPv6 /64) "
    "within 7 days, so every check from that address is dropped (anti-collusion, docs/domain.md §1.5); two "
    "reviewers on one machine must connect from different addresses",
}


async def test_a_check_that_does_not_count_says_which_rule_in_full() -> None:
    assert NOT_COUNTED == "recorded, not counted toward the quorum: "
    repo = await factories.create_repository()
    submitted = await submit_report(
        await factories.create_account(state="active"), repo.host, repo.owner, repo.name, report_body()
    )
    canonical = submitted["findings"][0]["canonical_public_id"]

    async def answer(account: Account, ip: str, **body: Any) -> tuple[bool, str | None]:
        sent = {k: v for k, v in check_body(**body).items() if v is not DROP}
        result = await record_check(account, canonical, sent, client_ip=ip)
        return result["counted"], result["reason"]

    assert await answer(await reviewer(), "192.0.2.1", provenance=DROP) == (False, WHY["provenance"])
    assert await answer(await reviewer(state="probation"), "192.0.2.2") == (False, WHY["state"])
    # a reviewer demoted after checking: the check stays, and no longer counts (authority revalidation)
    demoted = await reviewer()
    assert await answer(demoted, "192.0.2.3") == (True, None)
    await execute("UPDATE accounts SET trust_tier = 'contributor' WHERE id = :a", a=demoted.id)
    [check] = await rows("SELECT id FROM canonical_finding_checks WHERE account_id = :a", a=demoted.id)
    async with db.read_session(replica=False) as session:
        assert await why_not_counted(session, check["id"]) == WHY["tier"]
    maintainer = await reviewer()
    await execute(
        "INSERT INTO repository_maintainers (repository_id, account_id) VALUES (:r, :a)", r=repo.id, a=maintainer.id
    )
    assert await answer(maintainer, "192.0.2.4") == (False, WHY["maintainer"])
    assert await answer(await reviewer(), "192.0.2.5") == (True, None)
    assert await answer(await reviewer(), "192.0.2.5") == (False, WHY["address"])
    # a moderator is qualified whatever the tier; the rules are checked in the order above
    moderator = await factories.create_account(platform_role="moderator")
    assert await answer(moderator, "192.0.2.6") == (True, None)
    newer = "b" * 40
    await submit_report(
        await factories.create_account(state="active"), repo.host, repo.owner, repo.name, report_body(commit_sha=newer)
    )
    assert await answer(await reviewer(), "192.0.2.7", commit_sha=COMMIT, provenance=DROP) == (
        False,
        WHY["commit"].format(sha=newer),
    )


async def test_revalidation_counts_each_changed_finding_and_unverifies_its_report() -> None:
    """A reviewer demoted after confirming both findings of a report: both canonicals lose quorum, the report its
    verification, and both keys are marked for this repository only."""
    repo = await factories.create_repository()
    body = report_body(findings=[finding(title="First flaw", line_start=1), finding(title="Second flaw", line_start=2)])
    submitted = await submit_report(
        await factories.create_account(state="active"), repo.host, repo.owner, repo.name, body
    )
    canonicals = [f["canonical_public_id"] for f in submitted["findings"]]
    demoted, kept = await reviewer(), await reviewer()
    for account in (demoted, kept):
        for canonical in canonicals:
            await record_check(account, canonical, check_body(), client_ip=f"192.0.2.{account.id}")
    [scan] = await rows("SELECT id, verified_at FROM scans WHERE repository_id = :r", r=repo.id)
    assert scan["verified_at"] is not None
    async with db.transaction() as session:
        await session.execute(text("DELETE FROM infestation_dirty_keys"))
        await session.execute(text("UPDATE accounts SET trust_tier = 'contributor' WHERE id = :id"), {"id": demoted.id})
        assert await refresh_repository_checks(session, repo.id) == 2
    statuses = await rows(
        "SELECT status, confirmations_count FROM canonical_findings WHERE repository_id = :r", r=repo.id
    )
    assert [tuple(s.values()) for s in statuses] == [("open", 1), ("open", 1)]
    [scan] = await rows("SELECT verified_at FROM scans WHERE id = :id", id=scan["id"])
    assert scan["verified_at"] is None
    dirty = await rows("SELECT pattern_key, reason, repository_ids FROM infestation_dirty_keys ORDER BY pattern_key")
    assert [tuple(d.values()) for d in dirty] == sorted(
        (pattern_key(title), "status", [repo.id]) for title in ("First flaw", "Second flaw")
    )


async def test_a_report_without_findings_counts_its_disputes_against_its_confirmations() -> None:
    repo = await factories.create_repository()
    submitter = await factories.create_account(state="active")
    scan_id = int((await submit_report(submitter, repo.host, repo.owner, repo.name, report_body(findings=[])))["id"])

    async def confirm(verdict: str) -> bool:
        answer = await record_confirmation(
            await reviewer(), scan_id, {"verdict": verdict, "provenance": "human", "notes": NOTES}
        )
        return bool(answer["verified"])

    async def counts() -> tuple[int, int, bool]:
        [row] = await rows(
            "SELECT confirmations_count, disputes_count, verified_at FROM scans WHERE id = :id", id=scan_id
        )
        return row["confirmations_count"], row["disputes_count"], row["verified_at"] is not None

    assert [await confirm("disputed"), await confirm("disputed")] == [False, False]
    assert await counts() == (0, 2, False)
    assert [await confirm("confirmed") for _ in range(3)] == [False, False, False]  # C - D = 1
    assert await counts() == (3, 2, False)
    assert await confirm("confirmed") is True
    assert await counts() == (4, 2, True)


async def test_recomputing_the_reports_at_a_commit_says_how_many_changed() -> None:
    repo = await factories.create_repository()
    for _ in range(2):  # two reports of the same finding at the same commit
        await submit_report(
            await factories.create_account(state="active"), repo.host, repo.owner, repo.name, report_body()
        )
    [canonical] = await rows("SELECT id, public_id FROM canonical_findings WHERE repository_id = :r", r=repo.id)
    demoted = await reviewer()
    for account in (demoted, await reviewer()):
        await record_check(account, str(canonical["public_id"]), check_body(), client_ip=f"192.0.2.{account.id}")
    verified = await rows("SELECT verified_at FROM scans WHERE repository_id = :r", r=repo.id)
    assert [s["verified_at"] is not None for s in verified] == [True, True]
    async with db.transaction() as session:
        await session.execute(text("UPDATE accounts SET trust_tier = 'contributor' WHERE id = :id"), {"id": demoted.id})
        assert await recompute_canonical_status(session, canonical["id"]) is True
        assert await recompute_scans_at_commit(session, canonical["id"], COMMIT) == 2
        assert await recompute_scans_at_commit(session, canonical["id"], COMMIT) == 0
        assert await recompute_scan_verification(session, 10**12) is False  # no such report: nothing changed


async def test_a_batch_recompute_goes_on_past_an_unchanged_finding() -> None:
    repo = await factories.create_repository()
    body = report_body(findings=[finding(title="Kept flaw", line_start=1), finding(title="Lost flaw", line_start=2)])
    submitted = await submit_report(
        await factories.create_account(state="active"), repo.host, repo.owner, repo.name, body
    )
    kept, lost = (f["canonical_public_id"] for f in submitted["findings"])
    demoted = await reviewer()
    await record_check(demoted, lost, check_body(), client_ip="192.0.2.1")
    await record_check(await reviewer(), lost, check_body(), client_ip="192.0.2.2")
    found = await rows("SELECT id, public_id FROM canonical_findings WHERE repository_id = :r", r=repo.id)
    ids = {str(r["public_id"]): r["id"] for r in found}
    async with db.transaction() as session:
        await session.execute(text("UPDATE accounts SET trust_tier = 'contributor' WHERE id = :id"), {"id": demoted.id})
        # the unchanged finding first: the one after it is still recomputed
        assert await recompute_canonical_statuses(session, [ids[kept], ids[lost]]) == {ids[lost]}
    statuses = await rows(
        "SELECT title, status FROM canonical_findings WHERE repository_id = :r ORDER BY id", r=repo.id
    )
    assert [tuple(s.values()) for s in statuses] == [("Kept flaw", "open"), ("Lost flaw", "open")]
