"""The drain refreshes and settles several keys in one transaction (issue 27, docs/domain.md §5.5): a key re-dirtied
while its batch waits is handed back, not deleted, and the others of the batch are done."""

from __future__ import annotations

import asyncio
import time

import pytest
from sqlalchemy import text

from app.accounts.models import Account
from app.infestations import dirty_queue
from app.kernel import db
from app.reports.finding_memory import pattern_key
from tests import factories as f
from tests.infestations.test_drain import dirty, mark, repo_count

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
