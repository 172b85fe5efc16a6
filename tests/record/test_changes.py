"""The change feed's write side: each kind written in the change's own transaction through the real services, the
withdrawal reason classes, hard deletes, the set-based seed, the export's snapshot cursor, and the concurrent
no-skip guarantee (writers committing out of allocation order while a reader polls)."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from sqlalchemy import text

from app.accounts.models import Account
from app.feed.queries import changes_page
from app.kernel import db
from app.moderation import service as moderation
from app.record import changes
from app.record.models import FINDING_WITHDRAWN, LISTED_KIND, PUBLISHED, REPOSITORY_WITHDRAWN, STATUS
from app.record.outbox import mark_scan_dirty
from app.registry.models import Repository
from app.reports.service import submit_report
from tests import factories
from tests.moderation.support import NOTES, make_account
from tests.reports.support import finding, reach_quorum, report_body
from tests.sql import rows, scalar


async def entries() -> list[dict[str, Any]]:
    return await rows(
        "SELECT seq, kind, finding::text, canonical::text, repository_id, repository_key::text, status, reason "
        "FROM changes ORDER BY seq"
    )


async def kinds() -> list[str]:
    return [e["kind"] for e in await entries()]


async def submit(account: Account, repo: Repository, *titles: str) -> dict[str, Any]:
    body = report_body([finding(title=t, file=f"src/{i}.py") for i, t in enumerate(titles)])
    return await submit_report(account, repo.host, repo.owner, repo.name, body)


async def test_a_report_announces_its_repository_findings_and_their_status_in_its_transaction() -> None:
    agent = await make_account("agent")
    repo = await factories.create_repository()

    report = await submit(agent, repo, "SQL injection in login", "Path traversal in upload")

    got = await entries()
    assert [e["kind"] for e in got] == [
        LISTED_KIND,
        PUBLISHED,
        PUBLISHED,
        STATUS,
        STATUS,
    ]
    assert [e["seq"] for e in got] == sorted(e["seq"] for e in got)
    assert {e["finding"] for e in got[1:3]} == {f["public_id"] for f in report["findings"]}
    assert {e["canonical"] for e in got[3:]} == {f["canonical_public_id"] for f in report["findings"]}
    assert {e["status"] for e in got[3:]} == {"open"}
    assert {e["repository_key"] for e in got[:3]} == {got[0]["repository_key"]}  # one opaque id per repository
    assert await scalar("SELECT count(*) FROM changes WHERE seq IS NULL") == 0


async def test_a_status_change_is_announced_once_and_a_check_that_changes_nothing_is_silent() -> None:
    agent = await make_account("agent")
    report = await submit(agent, await factories.create_repository(), "SQL injection in login")
    canonical = report["findings"][0]["canonical_public_id"]
    before = len(await entries())

    await reach_quorum(canonical, "confirmed")
    await reach_quorum(canonical, "confirmed")  # two more confirmations: still verified

    new = (await entries())[before:]
    assert [(e["kind"], e["canonical"], e["status"]) for e in new] == [(STATUS, canonical, "verified")]


async def test_withdrawals_say_their_reason_class_and_a_return_is_announced_again() -> None:
    agent = await make_account("agent")
    moderator = await make_account("mod", platform_role="moderator")
    repo = await factories.create_repository()
    report = await submit(agent, repo, "SQL injection in login")
    occurrence = report["findings"][0]["public_id"]
    [opaque] = {e["repository_key"] for e in await entries() if e["repository_key"]}

    await moderation.change_scan_visibility(moderator, report["id"], "restricted", "takedown", NOTES)
    await moderation.change_scan_visibility(moderator, report["id"], "public", "reviewed", NOTES)
    await moderation.change_repository_listing(
        moderator, repo.host, repo.owner, repo.name, "quarantined", "takedown", NOTES
    )
    await moderation.change_repository_listing(moderator, repo.host, repo.owner, repo.name, "listed", "reviewed", NOTES)
    mark = len(await entries())
    await moderation.delete_repository(repo.host, repo.owner, repo.name, actor_id=moderator.id, reason="gone")

    got = await entries()
    story = [(e["kind"], e["reason"]) for e in got[3:]]
    assert story == [
        (FINDING_WITHDRAWN, "moderation"),
        (PUBLISHED, None),
        (STATUS, None),  # announced again with the finding: a mirror dropped it at the withdrawal
        (FINDING_WITHDRAWN, "repository"),
        (REPOSITORY_WITHDRAWN, None),  # after its findings
        (LISTED_KIND, None),
        (PUBLISHED, None),
        (STATUS, None),
        (FINDING_WITHDRAWN, "deleted"),  # written before the rows went
        (REPOSITORY_WITHDRAWN, None),
    ]
    assert {e["finding"] for e in got if e["kind"] == FINDING_WITHDRAWN} == {occurrence}
    assert {e["repository_key"] for e in got if e["kind"].startswith("repository.")} == {opaque}
    assert len(got) == mark + 2
    assert await scalar("SELECT count(*) FROM published_findings") == 0


async def test_a_finding_that_never_was_public_never_appears() -> None:
    agent = await make_account("agent")
    moderator = await make_account("mod", platform_role="moderator")
    quarantined, listed = (
        await factories.create_repository(listing_status="quarantined"),
        await factories.create_repository(),
    )
    await factories.create_instance(quarantined, agent, "SQL injection in login")
    scan, _canonical, _occurrence = await factories.create_instance(listed, agent, "Secret", visibility="restricted")

    await moderation.change_scan_visibility(moderator, scan.id, "public_summary", "summary only", NOTES)
    r = quarantined
    await moderation.change_repository_listing(moderator, r.host, r.owner, r.name, "pending", "reviewed", NOTES)

    assert await kinds() == [LISTED_KIND]  # the listed repository, announced with its report's change


async def test_the_seed_announces_what_is_public_once_set_based() -> None:
    """What migration 0005 does at upgrade time, and a backfill after a bulk load that bypassed the services."""
    agent = await make_account("agent")
    public, hidden = await factories.create_repository(), await factories.create_repository()
    _scan, canonical, occurrence = await factories.create_instance(public, agent, "SQL injection", status="verified")
    await factories.create_instance(public, agent, "Restricted", visibility="restricted")
    await factories.create_instance(hidden, agent, "Summary only", visibility="public_summary")

    async with db.transaction() as session:
        await changes.sync_all(session)
    async with db.transaction() as session:
        assert await changes.sync_all(session) == 0

    got = await entries()
    assert [e["kind"] for e in got] == [LISTED_KIND, LISTED_KIND, PUBLISHED, STATUS]
    assert (got[2]["finding"], got[3]["canonical"], got[3]["status"]) == (
        str(occurrence.public_id),
        str(canonical.public_id),
        "verified",
    )


async def test_a_transaction_writing_many_entries_commits_them_numbered_in_order_in_linear_time() -> None:
    """A takedown of a repository with 20,000 published findings writes 20,000 entries in one transaction, and each
    fires the deferred numbering trigger at commit. The first numbers them all; were each to rescan the pending ones,
    the commit would take the square of that (tens of seconds here, hours at 10^5)."""
    started = time.monotonic()
    async with db.transaction() as session:
        await session.execute(
            text(
                "INSERT INTO changes (kind, finding, reason) "
                f"SELECT '{FINDING_WITHDRAWN}', gen_random_uuid(), 'repository' FROM generate_series(1, 20000)"
            )
        )
    took = time.monotonic() - started

    numbered = await rows(
        "SELECT count(*) AS n, count(seq) AS numbered, max(seq) - min(seq) + 1 AS span, "
        "bool_and(by_id = by_seq) AS in_order FROM (SELECT seq, row_number() OVER (ORDER BY id) AS by_id, "
        "row_number() OVER (ORDER BY seq) AS by_seq FROM changes) x"
    )
    assert numbered == [{"n": 20000, "numbered": 20000, "span": 20000, "in_order": True}]
    assert took < 5, took  # about 0.3 s; the quadratic numbering took 25 s for 19,384 entries on this machine


async def test_the_snapshot_cursor_covers_what_the_snapshot_sees_and_counts_later_withdrawals() -> None:
    agent = await make_account("agent")
    moderator = await make_account("mod", platform_role="moderator")
    report = await submit(agent, await factories.create_repository(), "SQL injection in login")

    async with db.read_session(replica=False, transaction=True) as export:
        await export.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
        cursor = await changes.snapshot_cursor(export)
        await moderation.change_scan_visibility(moderator, report["id"], "restricted", "takedown", NOTES)
        assert await changes.snapshot_cursor(export) == cursor  # the snapshot does not move
    async with db.read_session(replica=False) as session:
        assert await changes.withdrawals_after(session, cursor) == 1
        page = await changes_page(cursor=cursor, limit=10)
        assert [e["kind"] for e in page["entries"]] == [FINDING_WITHDRAWN]
        assert await changes.withdrawals_after(session, page["next_cursor"] or "") == 0
        assert (await changes_page(cursor=None, limit=3))["next_cursor"] == cursor  # the 3 entries before


async def test_a_reader_polling_while_writers_commit_out_of_order_never_skips_an_entry() -> None:
    """Writers allocate entries, then hold their transaction open a random while (the rest of a service's work),
    so transactions commit in another order than they wrote; a reader polls the feed from its cursor all along.
    With a plain sequence the reader would pass a late-committing lower number and never see it."""
    agent = await make_account("agent")
    scans = []
    for _ in range(6):
        scan, _c, _o = await factories.create_instance(await factories.create_repository(), agent, "SQL injection")
        scans.append(scan)
    async with db.transaction() as session:
        await changes.sync_all(session)  # each scan public and announced: every round below writes entries
    rng = random.Random(14)
    done = asyncio.Event()

    async def writer(scan_id: int) -> None:
        for round_ in range(12):
            async with db.transaction() as session:
                visibility = "restricted" if round_ % 2 == 0 else "public"
                await session.execute(
                    text("UPDATE scans SET visibility = :v WHERE id = :id"), {"v": visibility, "id": scan_id}
                )
                await mark_scan_dirty(session, scan_id, "visibility")
                await asyncio.sleep(rng.uniform(0, 0.015))

    seen: list[int] = []

    async def reader() -> None:
        cursor = None
        while True:
            finished = done.is_set()
            page = await changes_page(cursor=cursor, limit=7)
            seen.extend(e["seq"] for e in page["entries"])
            cursor = page["next_cursor"]
            if finished and not page["entries"]:
                return
            await asyncio.sleep(0.002)

    polling = asyncio.create_task(reader())
    await asyncio.gather(*(writer(s.id) for s in scans))
    done.set()
    await polling

    table = [r["seq"] for r in await rows("SELECT seq FROM changes ORDER BY seq")]
    assert len(table) == 6 * 3 + 6 * (6 * 1 + 6 * 2)  # seed; per writer 6 withdrawals, 6 returns with status
    assert seen == table
