"""`db.reader()`, the public read through the driver (docs/benchmarks.md "Public pages when the cache misses"):
the rows `session.execute` gives, SQLAlchemy's exception classes, the statement listeners told, a dead connection's
read retried on the primary, and a pooled connection handed back as it was lent (not left in autocommit)."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy import text

from app.kernel import db, outages
from app.kernel.config import settings
from tests.statements import statements_sent


@pytest.fixture(autouse=True)
def no_replica(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite names the primary as its replica too; without one, public reads take the autocommit pool."""
    monkeypatch.delenv("DATABASE_REPLICA_URL", raising=False)


ROWS = text("SELECT n, n * :k AS times, now() AS at FROM generate_series(1, 3) AS n WHERE n > :above ORDER BY n")


async def test_the_same_rows_as_a_read_session() -> None:
    async with db.reader() as read:
        ours = await read.maps(ROWS, {"k": 10, "above": 1})
        named = await read.rows(ROWS, {"k": 10, "above": 1})
    async with db.read_session() as session:
        theirs = [dict(row) for row in (await session.execute(ROWS, {"k": 10, "above": 1})).mappings()]
    assert [(row["n"], row["times"]) for row in ours] == [(row["n"], row["times"]) for row in theirs]
    assert [list(row) for row in ours] == [list(row) for row in theirs] == [["n", "times", "at"]] * 2
    assert [type(row["at"]) for row in ours] == [type(row["at"]) for row in theirs]
    assert [(row.n, row.times) for row in named] == [(2, 20), (3, 30)]


async def test_each_statement_commits_on_its_own_and_the_connection_goes_back_transactional() -> None:
    async with db.reader() as read:
        (first,) = await read.rows(text("SELECT now() AS at"))
        await asyncio.sleep(0.01)
        (second,) = await read.rows(text("SELECT now() AS at"))
    assert second.at > first.at, "autocommit: every statement its own transaction"
    for _ in range(2 * settings().db_pool_size + 1):  # every pooled connection, whichever the pool lends
        async with db.reader() as read:
            await read.rows(text("SELECT 1"))
    for _ in range(2 * settings().db_pool_size + 1):
        async with db.transaction() as session:
            before = (await session.execute(text("SELECT now()"))).scalar_one()
            await asyncio.sleep(0.002)
            assert (await session.execute(text("SELECT now()"))).scalar_one() == before, "a transaction block"


async def test_errors_are_sqlalchemys_and_a_lost_connection_is_an_outage_retried_on_the_primary() -> None:
    with pytest.raises(sa_exc.DataError):
        async with db.reader() as read:
            await read.rows(text("SELECT 1 / :zero AS x"), {"zero": 0})
    with db.request_reads() as fence, pytest.raises(sa_exc.DBAPIError) as raised:
        async with db.reader() as read:
            await read.rows(text("SELECT pg_terminate_backend(pg_backend_pid())"))
    assert raised.value.connection_invalidated and fence.retry
    assert outages.dependency_of(raised.value) == outages.DATABASE
    assert isinstance(raised.value.orig, psycopg.OperationalError)
    async with db.reader() as read:  # the pool gives a working connection next
        assert [tuple(row) for row in await read.rows(text("SELECT 1"))] == [(1,)]


async def test_statement_listeners_are_told() -> None:
    with statements_sent() as seen:
        async with db.reader() as read:
            await read.rows(text("SELECT :k AS k"), {"k": 1})
    assert seen == ["SELECT %(k)s AS k"]


PID = text("SELECT pg_backend_pid() AS pid")


async def _pid(read: db.Reader) -> int:
    (row,) = await read.rows(PID)
    return int(row.pid)


def _checked_out() -> int:
    return int(db.autocommit_engine().pool.checkedout())  # type: ignore[attr-defined]


async def test_reads_within_a_reader_share_its_connection_but_not_a_transaction_or_another_task() -> None:
    async with db.reader() as outer:
        pid = await _pid(outer)
        async with db.reader() as inner:
            assert await _pid(inner) == pid
        async with db.read_session() as session:
            assert (await session.execute(PID)).scalar_one() == pid, "an ORM read on the same connection"
        async with db.read_session(transaction=True) as session:
            assert (await session.execute(PID)).scalar_one() != pid, "a transaction block of its own"

        async def elsewhere() -> int:
            async with db.reader() as read:
                return await _pid(read)

        # a task started within the block reads on its own connection (one connection runs one statement at once)
        assert pid not in await asyncio.gather(elsewhere(), elsewhere())
        assert await _pid(outer) == pid


async def test_shared_reads_take_a_connection_only_when_read_and_hand_it_back_at_the_end() -> None:
    async with db.reader() as read:  # the pool is open
        await read.rows(text("SELECT 1"))
    before = _checked_out()
    async with db.shared_reads():
        assert _checked_out() == before, "nothing read yet: no connection"
    async with db.shared_reads():
        async with db.reader() as first:
            pid = await _pid(first)
        assert _checked_out() == before + 1, "kept for the next read of the block"
        async with db.reader() as second:
            assert await _pid(second) == pid
    assert _checked_out() == before


async def test_a_failed_statement_ends_the_sharing_and_a_lost_connection_is_still_retried() -> None:
    async with db.reader() as outer:
        pid = await _pid(outer)
        with pytest.raises(sa_exc.DataError):  # caught: the page goes on
            async with db.reader() as inner:
                await inner.rows(text("SELECT 1 / :zero AS x"), {"zero": 0})
        async with db.reader() as after:
            assert await _pid(after) != pid, "a connection of its own after a failure on the shared one"
    with db.request_reads() as fence:
        async with db.reader() as outer:
            with pytest.raises(sa_exc.DBAPIError) as raised:
                async with db.reader() as inner:
                    await inner.rows(text("SELECT pg_terminate_backend(pg_backend_pid())"))
            assert raised.value.connection_invalidated and fence.retry, "caught or not, the request runs again"
    async with db.reader() as read:
        assert [tuple(row) for row in await read.rows(text("SELECT 1"))] == [(1,)]


async def test_statements_commit_each_on_its_own_and_behind_a_pooler_in_one_transaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`db.statements()`, the evidence caches' reads and writes: each statement commits on its own, and behind a
    transaction pooler the block is one transaction (a pooler gives each transaction any server connection)."""
    async with db.statements() as primary:
        (first,) = await primary.rows(text("SELECT now() AS at"))
        await asyncio.sleep(0.01)
        (second,) = await primary.rows(text("SELECT now() AS at"))
    assert second.at > first.at, "autocommit: every statement its own transaction"
    monkeypatch.setenv("DB_TRANSACTION_POOLING", "1")
    async with db.statements() as pooled:
        (first,) = await pooled.rows(text("SELECT now() AS at"))
        await asyncio.sleep(0.01)
        (second,) = await pooled.rows(text("SELECT now() AS at"))
    assert second.at == first.at, "behind a pooler: one transaction block"
