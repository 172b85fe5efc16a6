"""The lean report path (issue 27, docs/benchmarks.md "Ingest capacity"): a report's transaction writes its rows once
and builds its answer from what the statements returned, so it reads back nothing it wrote, and a one-finding
report costs 4 statements, quota-exempt or not, with a new canonical or a known one (it cost 33, six of them reading back its own rows; then 11 for an
exempt scanner, 13 for a counted one: docs/benchmarks.md "Profile: the report transaction")."""

from __future__ import annotations

import re
import uuid

import httpx

from app.kernel import db
from app.reports.assimilation import assimilate_report, fingerprints_of
from app.reports.service import submit_report
from app.reports.validation import validate_report
from tests import factories
from tests.reports.support import finding, report_body
from tests.reports.test_reports_api import post, reports_url, token_for
from tests.sql import rows
from tests.statements import statements_sent

# a read of the report's own rows by its id: the scan, its findings (the old path re-read both)
READ_BACK = re.compile(r"^\s*SELECT\s[^()]*\bFROM\s+(scans|scan_findings)\b", re.I)


async def test_a_new_report_reads_back_nothing_it_wrote_and_costs_four_statements() -> None:
    account = await factories.create_account(state="active", platform_role="moderator")  # quota-exempt
    repo = await factories.create_repository("acme", "lean")
    body = report_body([finding(file="src/lean.py", title="Lean finding")], run_id="lean-1")
    with statements_sent() as statements:
        answer = await submit_report(account, repo.host, repo.owner, repo.name, body)
    assert [s for s in statements if READ_BACK.match(s)] == []
    # actor and repository; scan and canonicals known; canonicals new and findings; metrics, feed and dirty keys
    assert len(statements) <= 4, "\n---\n".join(statements)
    [stored] = answer["findings"]
    assert stored["disposition"] == "new" and stored["canonical_public_id"]

    # the same run again (a retry after a lost answer): the stored report, same ids, nothing written
    again = await submit_report(account, repo.host, repo.owner, repo.name, body)
    assert again == answer

    # the same finding in another run: its canonical is known now, and its counters' refresh rides in the last
    # statement with the metrics, the feed and the dirty keys
    with statements_sent() as known:
        await submit_report(account, repo.host, repo.owner, repo.name, body | {"run_id": "lean-1b"})
    assert len(known) <= 4, "\n---\n".join(known)


async def test_a_report_request_costs_four_statements_end_to_end_once_its_tokens_check_is_remembered(
    client: httpx.AsyncClient,
) -> None:
    """Over HTTP, everything the request sends: the bearer check (one statement) when it is not remembered, then the
    report's 4; a request within REMEMBERED_CHECK_SECONDS of a passed check sends the report's 4 alone, its token
    checked in the first of them (docs/security.md "API tokens"; was 5 for every request)."""
    account = await factories.create_account(state="active")
    repo = await factories.create_repository("acme", "lean-http")
    headers = await token_for(account)
    sent = []
    for run in ("lean-http-1", "lean-http-2"):
        with statements_sent() as statements:
            answer = await post(client, reports_url(repo), headers, report_body([finding()], run_id=run))
        assert answer.status_code == 201, answer.text
        sent.append(statements)
    checked, remembered = sent
    assert len(checked) == 5 and "api_tokens" in checked[0], "\n---\n".join(checked)
    assert len(remembered) == 4, "\n---\n".join(remembered)
    assert [s for s in remembered if "last_used_at" in s] == []  # no bearer statement
    assert "api_tokens" in remembered[0]  # the token checked with the account and the repository


async def test_a_counted_accounts_report_reads_its_run_and_quotas_with_its_insert() -> None:
    """An account under §9 quotas: its stored run and its counts ride in the scan's insert (was three statements),
    and so does the lookup of the canonicals its findings may match."""
    account = await factories.create_account(state="active")
    repo = await factories.create_repository("acme", "lean-counted")
    body = report_body([finding(file="src/lean.py", title="Lean finding")], run_id="lean-2")
    with statements_sent() as statements:
        answer = await submit_report(account, repo.host, repo.owner, repo.name, body)
    assert len(statements) <= 4, "\n---\n".join(statements)
    with statements_sent() as again:  # a retry: the stored report, after the account and its run are read
        assert await submit_report(account, repo.host, repo.owner, repo.name, body) == answer
    assert len(again) <= 4, "\n---\n".join(again)


async def test_a_canonical_inserted_by_someone_else_meanwhile_is_counted_and_the_findings_stored_apart() -> None:
    """The new canonicals and the findings go in as one statement only if every new canonical was inserted by it:
    one that another writer inserted after the lookup (`inserted` false) stores no finding there, and the findings
    are stored after, their disposition counting the reports that carry it (here one: `matches_existing`)."""
    account = await factories.create_account(state="active")
    repo = await factories.create_repository("acme", "lean-race")
    raced = finding(file="src/race.py", title="Race finding")
    body = report_body([raced, finding(file="src/new.py", title="Other")])
    first = await submit_report(account, repo.host, repo.owner, repo.name, report_body([raced]))
    report = validate_report(body | {"commit_sha": "c" * 40})
    scan = await factories.create_scan(repo, account, commit_sha=report.commit_sha)
    async with db.transaction() as session:
        # the lookup as it was before the first report's canonical existed: nothing known
        assimilated, stored = await assimilate_report(
            session, scan_id=scan.id, repository_id=repo.id, commit_sha=report.commit_sha, model=report.model,
            findings=report.findings, fingerprints_found=(fingerprints_of(report.findings), []),
        )  # fmt: skip
    assert [link.disposition for link in assimilated.links] == ["matches_existing", "new"]
    assert assimilated.links[0].canonical.public_id == uuid.UUID(first["findings"][0]["canonical_public_id"])
    assert len(assimilated.created) == 1  # only the other one
    linked = await rows(
        "SELECT public_id, canonical_finding_id, disposition FROM scan_findings WHERE scan_id = :id ORDER BY position",
        id=scan.id,
    )
    assert [(r["public_id"], r["disposition"]) for r in linked] == [
        (public_id, link.disposition) for (_id, public_id), link in zip(stored, assimilated.links, strict=True)
    ]
    assert [r["canonical_finding_id"] for r in linked] == [link.canonical.id for link in assimilated.links]
