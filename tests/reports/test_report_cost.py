"""What one report costs the database (docs/security.md, "Limits"): storing and assimilating a report takes the same
number of SQL statements whatever its number of findings, new canonicals or known ones, so a valid report at the
200-finding limit is one request's work rather than 1,400 round trips (bench/hostile_bench.py times it)."""

from __future__ import annotations

from app.reports.service import submit_report
from tests import factories
from tests.reports.support import finding, report_body
from tests.statements import statements_sent


async def _statements_for(findings: int, commit: str) -> int:
    account = await factories.create_account(state="active", platform_role="moderator")  # no daily quota
    repo = await factories.create_repository("acme", f"cost-{findings}")
    body = report_body([finding(file=f"src/f{i}.py", title=f"Finding {i}") for i in range(findings)], commit_sha=commit)
    with statements_sent() as new:
        await submit_report(account, repo.host, repo.owner, repo.name, body)
    with statements_sent() as known:  # the same findings again: every canonical is a known one now
        await submit_report(account, repo.host, repo.owner, repo.name, body | {"commit_sha": "b" * 40})
    assert len(known) <= len(new), "matching known canonicals costs no more than creating them"
    return len(new)


async def test_a_report_costs_the_same_statements_whatever_its_number_of_findings() -> None:
    two = await _statements_for(2, "a" * 40)
    hundred = await _statements_for(100, "c" * 40)
    assert hundred == two, f"{two} statements for 2 findings, {hundred} for 100"
    assert two < 60


async def test_one_report_of_known_new_and_repeated_findings_links_each_in_position_order() -> None:
    """The set-based assimilation decides as the one-by-one walk did (docs/domain.md §2.6): a finding repeated in
    the same report links to the canonical its first occurrence created and counts that report as a prior one."""
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    known = finding(file="lib/known.py", title="Known finding")
    first = await submit_report(account, repo.host, repo.owner, repo.name, report_body([known]))
    body = report_body(
        [
            finding(file="lib/new.py", title="New finding"),
            known,
            finding(file="./lib/new.py", title="Likely: new finding."),  # the first one's fingerprint
        ],
        commit_sha="b" * 40,
    )
    second = await submit_report(account, repo.host, repo.owner, repo.name, body)
    new, again, repeated = second["findings"]
    assert [f["disposition"] for f in second["findings"]] == ["new", "matches_existing", "matches_existing"]
    assert again["canonical_public_id"] == first["findings"][0]["canonical_public_id"]
    assert repeated["canonical_public_id"] == new["canonical_public_id"] != again["canonical_public_id"]
