"""The drain refreshes and settles several keys in one transaction (issue 27, docs/domain.md §5.5): a key re-dirtied
while its batch waits is handed back, not deleted, and the others of the batch are done; the batch's set-based
statements leave every key as its own refresh would."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import event, text

from app.accounts.models import Account
from app.infestations import dirty_queue, projection
from app.kernel import db
from app.record import outbox
from app.reports.finding_memory import pattern_key
from tests import factories as f
from tests.infestations.support import snapshot
from tests.infestations.test_drain import dirty, mark, repo_count
from tests.sql import execute, rows

FIRST, SECOND = sorted(
    ["Hard-coded credentials in settings", "Open redirect after login"], key=lambda title: pattern_key(title)
)


@pytest.fixture
async def reporter() -> Account:
    return await f.create_account()


async def test_a_batch_hands_back_the_key_redirtied_while_it_waited_and_settles_the_others(reporter: Account) -> None:
    repo_a, repo_b = await f.create_repository(), await f.create_repository()
    for title in (FIRST, SECOND):
        await f.create_instance(repo_a, reporter, title)
    await mark(pattern_key(FIRST), pattern_key(SECOND))

    # the batch locks both keys in one statement, in order: holding the second stops it before any refresh
    async with db.engine().connect() as blocker:
        await blocker.execute(text("SELECT pg_advisory_lock(hashtextextended(:k, 0))"), {"k": pattern_key(SECOND)})
        await blocker.commit()
        draining = asyncio.create_task(dirty_queue.drain(throttle=True, worker_id="worker-1"))
        deadline = time.monotonic() + 10
        while (row := await dirty(pattern_key(FIRST))) is None or row["claimed_by"] != "worker-1":
            assert time.monotonic() < deadline, "the drain never claimed the keys"
            await asyncio.sleep(0.02)
        await f.create_instance(repo_b, reporter, FIRST)  # a report lands on the first key meanwhile
        await mark(pattern_key(FIRST))
        await blocker.execute(text("SELECT pg_advisory_unlock(hashtextextended(:k, 0))"), {"k": pattern_key(SECOND)})
        await blocker.commit()
        result = await asyncio.wait_for(draining, 10)

    assert (result.refreshed, result.released, result.failed) == (2, 1, 0)
    assert await dirty(pattern_key(SECOND)) is None
    again = await dirty(pattern_key(FIRST))
    assert again is not None, "the re-dirtied key was deleted: its change could be lost"
    assert (again["version"], again["claimed_by"], again["attempts"]) == (2, None, 0)
    assert 28 <= again["available_in"] <= 30  # throttled: the hot-key interval after its refresh started
    assert await repo_count(pattern_key(SECOND)) == 1
    assert await dirty_queue.drain_all() == 1
    assert await repo_count(pattern_key(FIRST)) == 2


# A batch of every kind of key, each refreshed by the batch's set-based statements (issue 27, third pass); the
# reference is each key's own `refresh_pattern` with the same scope, from the same projection.
SCOPED, OTHER_SCOPED, WHOLE, NEW, EMPTIED, UNTOUCHED = (
    f"Batch parity pattern {n} in handler" for n in ("scoped", "other", "whole", "new", "emptied", "untouched")
)
PROJECTION = ("infestation_pattern_instances", "infestation_pattern_repos", "infestation_patterns")
PROJECTION_TABLES = (*PROJECTION, "infestation_pattern_status_windows")


def refresh_metrics() -> tuple[float, ...]:
    sample = REGISTRY.get_sample_value
    return (
        sample("tarakan_infestations_refreshes_total", {"scope": "key"}) or 0.0,
        sample("tarakan_infestations_refreshes_total", {"scope": "repositories"}) or 0.0,
        sample("tarakan_infestations_refresh_instances_sum", {"reason": "status"}) or 0.0,
        sample("tarakan_infestations_refresh_instances_count", {"reason": "status"}) or 0.0,
    )


async def test_a_batch_refreshes_every_key_to_what_its_own_refresh_gives(
    reporter: Account, caplog: pytest.LogCaptureFixture
) -> None:
    a, b, c = [await f.create_repository() for _ in range(3)]
    canonical: dict[tuple[str, int], int] = {}
    for title, repos in (
        (SCOPED, (a, b, c)),
        (OTHER_SCOPED, (b, c)),
        (WHOLE, (a, b)),
        (EMPTIED, (b,)),
        (UNTOUCHED, (a, c)),
    ):
        for repo in repos:
            canonical[title, repo.id] = (await f.create_instance(repo, reporter, title))[1].id
    for title in (SCOPED, OTHER_SCOPED, WHOLE, EMPTIED, UNTOUCHED):
        await projection.refresh_pattern(pattern_key(title))
    new_a = (await f.create_instance(a, reporter, NEW))[1].id
    await f.create_instance(c, reporter, NEW, status="verified")
    await f.create_instance(c, reporter, OTHER_SCOPED, status="disputed")

    async def change(title: str, repo: int, status: str) -> None:
        await execute(
            "UPDATE canonical_findings SET status = :s, updated_at = now() WHERE id = :id",
            s=status,
            id=canonical[title, repo],
        )

    # changes a mark names, and changes outside every scope: a scoped refresh leaves those stale, so a batch that
    # refreshed another key's repository (a key of one pair with the repository of another) would differ here
    await change(SCOPED, a.id, "fixed")
    await change(SCOPED, c.id, "verified")  # unmarked: SCOPED is scoped to a only, OTHER_SCOPED to c
    await change(WHOLE, b.id, "disputed")
    await change(UNTOUCHED, a.id, "fixed")  # unmarked, and its key not dirty
    await execute(
        "UPDATE scans SET visibility = 'restricted' WHERE id IN "
        "(SELECT scan_id FROM scan_findings WHERE canonical_finding_id = :id)",
        id=canonical[EMPTIED, b.id],
    )
    marks = {SCOPED: a.id, OTHER_SCOPED: c.id, WHOLE: None, NEW: a.id, EMPTIED: b.id}
    async with db.transaction() as session:
        for title, named in marks.items():
            await outbox.mark_dirty(session, [pattern_key(title)], "status", repository_id=named)
    # the batch's claims are those rows: the same scopes for the reference
    claims = {r["pattern_key"]: r["repository_ids"] for r in await rows("SELECT * FROM infestation_dirty_keys")}
    assert len(claims) == 5 and claims[pattern_key(NEW)] == [a.id] and claims[pattern_key(WHOLE)] is None
    async with db.transaction() as session:
        for table in PROJECTION_TABLES:
            await session.execute(text(f"DROP TABLE IF EXISTS saved_{table}"))  # a failed run's
            await session.execute(text(f"CREATE TABLE saved_{table} AS TABLE {table}"))

    before = refresh_metrics()
    for key in sorted(claims):
        scope = claims[key]
        await projection.refresh_pattern(key, reason="status", repositories=None if scope is None else tuple(scope))
    each = await snapshot()
    each_metrics = [after - was for after, was in zip(refresh_metrics(), before, strict=True)]
    async with db.transaction() as session:
        for table in PROJECTION_TABLES:
            await session.execute(text(f"DELETE FROM {table}"))
            await session.execute(text(f"INSERT INTO {table} SELECT * FROM saved_{table}"))
            # gone before the suite's schema check (tests/kernel/test_schema.py) sees them
            await session.execute(text(f"DROP TABLE saved_{table}"))

    before = refresh_metrics()
    with caplog.at_level(logging.INFO, logger="app.infestations.dirty_queue"):
        result = await dirty_queue.drain(throttle=False, worker_id="worker-1")
    assert "one at a time" not in caplog.text  # the batch ran, not its fallback
    assert (result.refreshed, result.released, result.failed) == (5, 0, 0)
    assert await rows("SELECT * FROM infestation_dirty_keys") == []
    batched = await snapshot()
    assert batched == each
    # per key, as its own refresh observes them: its scope and its instances
    assert [after - was for after, was in zip(refresh_metrics(), before, strict=True)] == each_metrics
    assert each_metrics[:2] == [2, 3]  # WHOLE and NEW whole, the three projected ones scoped
    patterns = {p["pattern_key"]: p for p in batched["infestation_patterns"]}
    assert pattern_key(EMPTIED) not in patterns and pattern_key(NEW) in patterns
    assert not [s for s in batched["infestation_pattern_status_windows"] if s["pattern_key"] == pattern_key(EMPTIED)]
    instances = {i["canonical_finding_id"]: i["status"] for i in batched["infestation_pattern_instances"]}
    assert (instances[canonical[SCOPED, a.id]], instances[canonical[SCOPED, c.id]]) == ("fixed", "open")
    assert (instances[canonical[WHOLE, b.id]], instances[canonical[UNTOUCHED, a.id]], instances[new_a]) == (
        "disputed",
        "open",
        "open",
    )
    assert patterns[pattern_key(OTHER_SCOPED)]["disputed_count"] == 1


async def test_a_drain_claims_in_autocommit_and_reads_its_backlog_in_its_last_batch(
    reporter: Account, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two connection uses a drain of one batch (issue 27, third pass): the claim alone, committed at once (a writer
    re-marking a claimed key never waits for the refresh), then the batch, which also reads the backlog."""
    repo = await f.create_repository()
    for title in (FIRST, SECOND):
        await f.create_instance(repo, reporter, title)
    await mark(pattern_key(FIRST), pattern_key(SECOND))
    monkeypatch.setattr(dirty_queue, "_progress_recorded_at", time.monotonic())  # no job_runs record this time
    checkouts: list[str] = []
    statements: list[tuple[str, bool]] = []

    def checkout(*_: object) -> None:
        checkouts.append("checkout")

    def executed(conn: Any, cursor: Any, statement: str, *_: object) -> None:
        statements.append((" ".join(statement.split())[:40], bool(conn.connection.dbapi_connection.autocommit)))

    engine = db.engine().sync_engine
    event.listen(engine.pool, "checkout", checkout)
    event.listen(engine, "before_cursor_execute", executed)
    try:
        result = await dirty_queue.drain(throttle=True, worker_id="worker-1")
    finally:
        event.remove(engine.pool, "checkout", checkout)
        event.remove(engine, "before_cursor_execute", executed)

    assert (result.refreshed, result.remaining_claimable, result.next_available_in_seconds) == (2, 0, None)
    assert len(checkouts) == 2, statements
    claim, *batch = statements
    assert claim == ("WITH candidates AS ( SELECT pattern_key ", True)
    assert batch and not any(autocommit for _, autocommit in batch)
    assert batch[-1][0].startswith("SELECT count(*) AS backlog")
    assert await dirty(pattern_key(FIRST)) is None and await dirty(pattern_key(SECOND)) is None
    assert REGISTRY.get_sample_value("tarakan_infestations_dirty_backlog") == 0
