"""The lean report path (issue 27, docs/benchmarks.md "Ingest capacity"): a report's transaction writes its rows once
and builds its answer from what the statements returned, so it reads back nothing it wrote, and a one-finding
report of a quota-exempt scanner costs 11 statements (it cost 33, six of them reading back its own rows)."""

from __future__ import annotations

import re

from app.reports.service import submit_report
from tests import factories
from tests.reports.support import finding, report_body
from tests.reports.test_report_cost import counted_statements

# a read of the report's own rows by its id: the scan, its findings (the old path re-read both)
READ_BACK = re.compile(r"^\s*SELECT\s[^()]*\bFROM\s+(scans|scan_findings)\b", re.I)


async def test_a_new_report_reads_back_nothing_it_wrote_and_costs_eleven_statements() -> None:
    account = await factories.create_account(state="active", platform_role="moderator")  # quota-exempt
    repo = await factories.create_repository("acme", "lean")
    body = report_body([finding(file="src/lean.py", title="Lean finding")], run_id="lean-1")
    with counted_statements() as statements:
        answer = await submit_report(account, repo.host, repo.owner, repo.name, body)
    assert [s for s in statements if READ_BACK.match(s)] == []
    # actor, repository, scan, canonicals known, canonicals new, findings, metrics, feed x3, dirty keys
    assert len(statements) <= 11, "\n---\n".join(statements)
    [stored] = answer["findings"]
    assert stored["disposition"] == "new" and stored["canonical_public_id"]

    # the same run again (a retry after a lost answer): the stored report, same ids, nothing written
    again = await submit_report(account, repo.host, repo.owner, repo.name, body)
    assert again == answer
