"""A new report's change-feed entries, dirty keys and metrics recount are one statement (app/record/outbox.py
`settle_new_report`, docs/domain.md §13 "Change feed"): what it announces is exactly what the whole diff would (the
set-based `sync_all` then finds nothing to publish or withdraw), in the scan diff's order, for a listed repository
(first report, then known and new findings), a pending one (its first report lists it) and one a moderator holds
back (nothing of it published, a known canonical's status still followed only while announced)."""

from __future__ import annotations

from typing import Any

from app.kernel import db
from app.record import changes
from app.record.models import LISTED_KIND, PUBLISHED, STATUS
from app.reports.service import submit_report
from tests import factories
from tests.reports.support import finding, report_body
from tests.sql import rows, scalar


async def _entries_after(seq: int) -> list[dict[str, Any]]:
    return await rows(
        "SELECT kind, finding::text, canonical::text, repository_key::text FROM changes WHERE seq > :seq ORDER BY seq",
        seq=seq,
    )


async def _head() -> int:
    return int(await scalar("SELECT coalesce(max(seq), 0) FROM changes"))


async def _nothing_left_to_announce() -> None:
    async with db.transaction() as session:
        assert await changes.sync_all(session) == 0
    assert await scalar("SELECT count(*) FROM changes WHERE seq IS NULL") == 0


async def test_a_new_reports_entries_are_what_the_whole_diff_would_write_in_its_order() -> None:
    agent = await factories.create_account(state="active", platform_role="moderator")  # no quota in the way
    listed = await factories.create_repository("acme", "feed-listed")

    head = await _head()
    first = await submit_report(
        agent, listed.host, listed.owner, listed.name,
        report_body([finding(file="src/a.py", title="SQL injection in login")], run_id="feed-1"),
    )  # fmt: skip
    got = await _entries_after(head)
    assert [e["kind"] for e in got] == [LISTED_KIND, PUBLISHED, STATUS]
    assert got[1]["finding"] == first["findings"][0]["public_id"]
    assert got[1]["repository_key"] == got[0]["repository_key"] is not None
    await _nothing_left_to_announce()

    head = await _head()
    second = await submit_report(
        agent, listed.host, listed.owner, listed.name,
        report_body(
            [finding(file="src/b.py", title="Path traversal in upload"),
             finding(file="src/a.py", title="SQL injection in login")],
            run_id="feed-2", commit_sha="b" * 40,
        ),
    )  # fmt: skip
    got = await _entries_after(head)
    # listed already: no listing entry; both findings published (ids in position order), only the new canonical's
    # status is news (the known one was announced open, and is still open)
    assert [e["kind"] for e in got] == [PUBLISHED, PUBLISHED, STATUS]
    assert [e["finding"] for e in got[:2]] == [f["public_id"] for f in second["findings"]]
    assert {e["repository_key"] for e in got[:2]} == {(await _entries_after(0))[0]["repository_key"]}
    assert got[2]["canonical"] == second["findings"][0]["canonical_public_id"]
    await _nothing_left_to_announce()

    pending = await factories.create_repository("acme", "feed-pending", listing_status="pending")
    head = await _head()
    await submit_report(agent, pending.host, pending.owner, pending.name, report_body([finding()], run_id="feed-3"))
    assert [e["kind"] for e in await _entries_after(head)] == [LISTED_KIND, PUBLISHED, STATUS]
    assert await scalar("SELECT listing_status FROM repositories WHERE id = :id", id=pending.id) == "listed"
    await _nothing_left_to_announce()

    held = await factories.create_repository("acme", "feed-held", listing_status="quarantined")
    head = await _head()
    await submit_report(agent, held.host, held.owner, held.name, report_body([finding()], run_id="feed-4"))
    assert await _entries_after(head) == []  # nothing public, nothing announced
    await _nothing_left_to_announce()
