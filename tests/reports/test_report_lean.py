"""The lean report path (issue 27, docs/benchmarks.md "Ingest capacity"): a report's transaction writes its rows once
and builds its answer from what the statements returned, so it reads back nothing it wrote, and a one-finding
report costs 5 statements, quota-exempt or not (it cost 33, six of them reading back its own rows; then 11 for an
exempt scanner, 13 for a counted one: docs/benchmarks.md "Profile: the report transaction")."""

from __future__ import annotations

import re

from app.reports.service import submit_report
from tests import factories
from tests.reports.support import finding, report_body
from tests.reports.test_report_cost import counted_statements

# a read of the report's own rows by its id: the scan, its findings (the old path re-read both)
READ_BACK = re.compile(r"^\s*SELECT\s[^()]*\bFROM\s+(scans|scan_findings)\b", re.I)


async def test_a_new_report_reads_back_nothing_it_wrote_and_costs_five_statements() -> None:
    account = await factories.create_account(state="active", platform_role="moderator")  # quota-exempt
    repo = await factories.create_repository("acme", "lean")
    body = report_body([finding(file="src/lean.py", title="Lean finding")], run_id="lean-1")
    with counted_statements() as statements:
        answer = await submit_report(account, repo.host, repo.owner, repo.name, body)
    assert [s for s in statements if READ_BACK.match(s)] == []
    # actor and repository; scan and canonicals known; canonicals new; findings; metrics, feed and dirty keys
    assert len(statements) <= 5, "\n---\n".join(statements)
    [stored] = answer["findings"]
    assert stored["disposition"] == "new" and stored["canonical_public_id"]

    # the same run again (a retry after a lost answer): the stored report, same ids, nothing written
    again = await submit_report(account, repo.host, repo.owner, repo.name, body)
    assert again == answer


async def test_a_counted_accounts_report_reads_its_run_and_quotas_with_its_insert() -> None:
    """An account under §9 quotas: its stored run and its counts ride in the scan's insert (was three statements),
    and so does the lookup of the canonicals its findings may match."""
    account = await factories.create_account(state="active")
    repo = await factories.create_repository("acme", "lean-counted")
    body = report_body([finding(file="src/lean.py", title="Lean finding")], run_id="lean-2")
    with counted_statements() as statements:
        answer = await submit_report(account, repo.host, repo.owner, repo.name, body)
    assert len(statements) <= 5, "\n---\n".join(statements)
    with counted_statements() as again:  # a retry: the stored report, after the account and its run are read
        assert await submit_report(account, repo.host, repo.owner, repo.name, body) == answer
    assert len(again) <= 4, "\n---\n".join(again)
