"""The worker's re-check of pending evidence (app/evidence/recheck.py, jobs/worker.py `evidence_recheck_job`)
against the loopback forge: while it is down the report waits with backoff (30 s doubling to 1 h), once it is back
the confirmed findings are published and a refused one is not, and after 7 days what is undecided expires (never
public) and the run may be sent again (docs/domain.md "Evidence at the commit")."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.evidence import recheck
from app.forge.demo import DemoForge
from app.kernel import db
from app.reports.service import submit_report
from jobs import worker
from tests import factories, sql
from tests.evidence.support import Pending, pending_report
from tests.harness import tarakan
from tests.reports.support import finding, report_body

COMMIT = "e" * 40
WHEN = datetime(2026, 11, 30, 12, 0).astimezone()
HERE, GONE = "src/here.py", "src/gone.py"


@pytest.fixture
def gate(forge: DemoForge, monkeypatch: pytest.MonkeyPatch) -> DemoForge:
    monkeypatch.setenv("EVIDENCE_CHECK", "gate")
    forge.add_repository("github.com", "pendco", "pendrepo", "main")
    forge.add_commit("github.com", "pendco", "pendrepo", COMMIT, {HERE: b"a = 1\nb = 2\nc = 3\n"}, WHEN)
    return forge


async def _held(**kwargs: Any) -> Pending:
    author = await factories.create_account(state="active")
    repo = await factories.create_repository("pendco", "pendrepo", listing_status="pending")
    found = [(HERE, "Open redirect after login"), (GONE, "Hallucinated buffer overflow")]
    return await pending_report(repo, author, found, commit_sha=COMMIT, **kwargs)


async def _scan(scan_id: int) -> Any:
    async with db.read_session(replica=False) as session:
        return (await session.execute(text("SELECT * FROM scans WHERE id = :id"), {"id": scan_id})).one()


async def _states(scan_id: int) -> list[tuple[str, bool, bool]]:
    found = await sql.rows(
        "SELECT evidence_state, published_at IS NOT NULL AS published, canonical_finding_id IS NOT NULL AS linked "
        "FROM scan_findings WHERE scan_id = :id ORDER BY position",
        id=scan_id,
    )
    return [(str(row["evidence_state"]), bool(row["published"]), bool(row["linked"])) for row in found]


async def test_down_then_back_publishes_the_confirmed_finding_with_backoff_between(
    gate: DemoForge, client: httpx.AsyncClient
) -> None:
    held = await _held()
    start = held.inserted_at
    assert (await recheck.recheck_pending(now=start)).summary() == {"published": 0, "rescheduled": 0, "expired": 0}

    gate.down()
    waits = []
    now = (await _scan(held.scan_id)).evidence_next_at  # 30 s after it was stored
    for _ in range(3):
        assert (await recheck.recheck_pending(now=now)).rescheduled == [held.scan_id]
        scan = await _scan(held.scan_id)
        waits.append((scan.evidence_next_at - now).total_seconds())
        assert (await recheck.recheck_pending(now=now + timedelta(seconds=1))).rescheduled == []  # not due yet
        now = scan.evidence_next_at
    assert waits == [60, 120, 240] and scan.evidence_attempts == 3 and scan.published_at is None
    assert recheck.backoff_seconds(20) == 3600  # at most an hour
    assert await _states(held.scan_id) == [("pending", False, False), ("pending", False, False)]

    gate.up()
    async with db.transaction() as session:  # the wall clock catches up with the test's: due now
        await session.execute(text("UPDATE scans SET evidence_next_at = now() WHERE id = :id"), {"id": held.scan_id})
    assert await worker.evidence_recheck_job({}, slot=now.isoformat()) is True  # the worker's job, one run
    scan = await _scan(held.scan_id)
    assert scan.published_at is not None and scan.evidence_next_at is None and scan.commit_committed_at == WHEN
    assert await _states(held.scan_id) == [("confirmed", True, True), ("refused", False, False)]
    entries = (await client.get("/api/v1/changes")).json()["entries"]
    published = [e["finding"] for e in entries if e["kind"] == "finding.published"]
    assert published == [held.findings[0][1]]
    assert (await client.get(f"/findings/{held.findings[0][1]}.json")).status_code == 200
    assert (await client.get(f"/findings/{held.findings[1][1]}.json")).status_code == 404
    async with db.read_session(replica=False) as session:
        runs = (await session.execute(text("SELECT count(*) FROM job_runs WHERE name = 'evidence_recheck'"))).scalar()
        reason = (
            await session.execute(
                text("SELECT evidence_reason FROM scan_findings WHERE id = :id"), {"id": held.findings[1][0]}
            )
        ).scalar()
    assert runs == 1 and reason == "not found in github.com/pendco/pendrepo at eeeeeee"


async def test_undecided_after_seven_days_expires_and_releases_the_run(
    gate: DemoForge, client: httpx.AsyncClient
) -> None:
    held = await _held(run_id="agent-run-7")
    gate.down()
    done = await recheck.recheck_pending(now=held.inserted_at + recheck.EXPIRY + timedelta(minutes=1))
    assert done.expired == [held.scan_id]
    scan = await _scan(held.scan_id)
    assert scan.published_at is None and scan.evidence_next_at is None and scan.run_id is None
    assert await _states(held.scan_id) == [("expired", False, False), ("expired", False, False)]
    entries = (await client.get("/api/v1/changes")).json()["entries"]
    assert [e for e in entries if e["kind"] == "finding.published"] == []
    assert (await client.get(f"/findings/{held.findings[0][1]}.json")).status_code == 404


async def test_the_cli_runs_the_due_re_checks_now(gate: DemoForge) -> None:
    held = await _held()
    async with db.transaction() as session:
        await session.execute(text("UPDATE scans SET evidence_next_at = now() WHERE id = :id"), {"id": held.scan_id})
    done = await tarakan("evidence", "recheck")
    assert done.code == 0, done.err
    assert done.out.strip() == "published: 1, rescheduled: 0, expired: 0"
    assert (await _scan(held.scan_id)).published_at is not None


async def test_with_the_gate_switched_off_a_pending_report_is_published_unchecked(
    gate: DemoForge, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = await _held()
    monkeypatch.setenv("EVIDENCE_CHECK", "off")
    gate.down()  # and no forge request is made
    asked = len(gate.requests())
    done = await recheck.recheck_pending(now=held.inserted_at + timedelta(minutes=1))
    assert done.published == [held.scan_id] and len(gate.requests()) == asked
    assert await _states(held.scan_id) == [("unchecked", True, True), ("unchecked", True, True)]


async def test_a_report_sent_while_the_forge_is_down_is_published_once_it_is_back(
    gate: DemoForge, client: httpx.AsyncClient
) -> None:
    author = await factories.create_account(state="active")
    repo = await factories.create_repository("pendco", "pendrepo", listing_status="pending")
    body = report_body(
        [finding(title="Open redirect after login", file=HERE, line_start=1, line_end=2)],
        commit_sha=COMMIT,
        run_id="agent-run-down",
    )
    gate.down()
    sent = await submit_report(author, repo.host, repo.owner, repo.name, body)
    occurrence = sent["findings"][0]["public_id"]
    assert sent["findings"][0]["evidence"]["state"] == "pending"
    assert (await client.get(f"/findings/{occurrence}.json")).status_code == 404
    assert "finding.published" not in (await client.get("/api/v1/changes")).text

    gate.up()
    due = (await _scan(int(sent["id"]))).evidence_next_at
    assert (await recheck.recheck_pending(now=due)).published == [int(sent["id"])]
    assert (await client.get(f"/findings/{occurrence}.json")).status_code == 200
    entries = (await client.get("/api/v1/changes")).json()["entries"]
    assert [e["finding"] for e in entries if e["kind"] == "finding.published"] == [occurrence]
    assert (await _scan(int(sent["id"]))).commit_committed_at == WHEN


async def test_two_runs_at_once_check_a_report_once(gate: DemoForge) -> None:
    held = await _held()
    gate.down()
    due = (await _scan(held.scan_id)).evidence_next_at
    runs = await asyncio.gather(recheck.recheck_pending(now=due), recheck.recheck_pending(now=due))
    assert sorted(len(run.rescheduled) for run in runs) == [0, 1]
    assert (await _scan(held.scan_id)).evidence_attempts == 1
