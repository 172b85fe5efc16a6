"""`db.rows`, the driver's own execute on the report path (docs/benchmarks.md "Ingest capacity"), answers and
fails as `session.execute` does: the same rows, SQLAlchemy's exception classes (a constraint is not an outage, a
lost connection is, and is invalidated), and the statement listeners told."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy import text

from app.kernel import db, outages
from tests.statements import statements_sent

ROWS = text("SELECT n, n * :k AS times FROM generate_series(1, 3) AS n WHERE n > :above ORDER BY n")


async def test_the_same_rows_as_execute() -> None:
    async with db.transaction() as session:
        ours = await db.rows(session, ROWS, {"k": 10, "above": 1})
        theirs = (await session.execute(ROWS, {"k": 10, "above": 1})).all()
    assert [tuple(r) for r in ours] == [tuple(r) for r in theirs] == [(2, 20), (3, 30)]
    assert [(r.n, r.times) for r in ours] == [(2, 20), (3, 30)]


async def test_a_constraint_and_bad_data_are_sqlalchemys_errors_and_no_outage() -> None:
    with pytest.raises(sa_exc.IntegrityError) as raised:
        async with db.transaction() as session:
            await session.execute(text("CREATE TEMP TABLE once (k int PRIMARY KEY) ON COMMIT DROP"))
            for _ in range(2):
                await db.rows(session, text("INSERT INTO once VALUES (:k) RETURNING k"), {"k": 1})
    assert isinstance(raised.value.orig, psycopg.errors.UniqueViolation)
    assert outages.dependency_of(raised.value) is None and not raised.value.connection_invalidated
    with pytest.raises(sa_exc.DataError):  # the API's 4xx for bad data (app.main's handler), as with execute
        async with db.transaction() as session:
            await db.rows(session, text("SELECT 1 / :zero AS x"), {"zero": 0})


async def test_a_lost_connection_is_an_outage_and_invalidated() -> None:
    with pytest.raises(sa_exc.DBAPIError) as raised:
        async with db.transaction() as session:
            await db.rows(session, text("SELECT pg_terminate_backend(pg_backend_pid())"), {})
    assert raised.value.connection_invalidated
    assert outages.dependency_of(raised.value) == outages.DATABASE
    assert isinstance(raised.value.orig, psycopg.OperationalError)
    async with db.transaction() as session:  # the pool gives a working connection next
        assert [tuple(r) for r in await db.rows(session, text("SELECT 1"), {})] == [(1,)]


async def test_statement_listeners_are_told() -> None:
    with statements_sent() as seen:
        async with db.transaction() as session:
            await db.rows(session, ROWS, {"k": 1, "above": 0})
    assert seen == ["SELECT n, n * %(k)s AS times FROM generate_series(1, 3) AS n WHERE n > %(above)s ORDER BY n"]
