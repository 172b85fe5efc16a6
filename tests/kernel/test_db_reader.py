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
