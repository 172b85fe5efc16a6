"""Statements sent by psycopg itself, on a connection SQLAlchemy checked out (`db.rows`, `db.Reader`): SQLAlchemy's
execute costs about three times the driver's CPU per statement (its greenlet hop and result machinery;
docs/benchmarks.md "Ingest capacity"). What callers and outage handling see stays what `execute` gives:
named-tuple rows, the `before_cursor_execute` / `after_cursor_execute` listeners told (tests count statements), and
SQLAlchemy's exception classes (a lost connection invalidated)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import pq
from psycopg.rows import namedtuple_row
from sqlalchemy import Connection, TextClause
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
from sqlalchemy.util import greenlet_spawn

_compiled: dict[TextClause, str] = {}
_HELD = "tarakan.driver"  # session.info: (its transaction, the connection, the driver's connection)
NO_PARAMS: Mapping[str, Any] = {}


async def execute(
    sync: Connection,
    driver: psycopg.AsyncConnection[Any],
    statement: TextClause,
    params: Mapping[str, Any],
) -> list[Any]:
    """`statement` on `driver`, the raw connection of `sync` (its transaction, or its autocommit)."""
    sql = _compiled.get(statement)
    if sql is None:
        sql = _compiled[statement] = str(statement.compile(dialect=sync.dialect))
    for listener in sync.dispatch.before_cursor_execute:
        listener(sync, None, sql, params, None, False)
    try:
        async with driver.cursor(row_factory=namedtuple_row) as cursor:
            await cursor.execute(sql, params)
            # the result's status, not `description` (which builds a column object per column, each statement)
            result = cursor.pgresult
            found = await cursor.fetchall() if result is not None and result.status == pq.ExecStatus.TUPLES_OK else []
    except psycopg.Error as exc:
        lost = (
            driver.closed
            or driver.broken
            or (isinstance(exc, psycopg.errors.FeatureNotSupported) and "cached plan must not change" in str(exc))
        )  # a connection lost, or a plan a migration outdated (as engines._drop_stale_prepared)
        if lost:
            await greenlet_spawn(sync.invalidate, exc)  # what AsyncConnection.invalidate does
        raise sa_exc.DBAPIError.instance(
            sql, params, exc, psycopg.Error, connection_invalidated=lost, dialect=sync.dialect
        ) from exc
    for listener in sync.dispatch.after_cursor_execute:
        listener(sync, None, sql, params, None, False)
    return found


async def rows(session: AsyncSession, statement: TextClause, params: Mapping[str, Any]) -> list[Any]:
    """`session.execute(statement, params).all()` on the session's connection and transaction, sent by psycopg.
    For SQL text whose parameters need no type processing."""
    transaction = session.sync_session.get_transaction()
    held = session.info.get(_HELD)
    if held is None or held[0] is not transaction or transaction is None:
        connection = await session.connection()
        raw = await connection.get_raw_connection()
        # the connection stays the transaction's until it ends: its next statements skip two greenlet hops
        sync = connection.sync_connection
        held = session.info[_HELD] = (session.sync_session.get_transaction(), sync, raw.driver_connection)
    return await execute(held[1], held[2], statement, params)  # type: ignore[arg-type]


class Reader:
    """A public read's statements, sent by psycopg (`rows`): on a pooled connection of the primary in autocommit
    (`connection`, checked out of `engine`'s pool), or, where a read must keep its session (a replica in use, a
    transaction pooler), on a `read_session()`. What `db.reader()` yields."""

    __slots__ = ("_connection", "_driver", "_engine", "_session", "on_primary")

    def __init__(
        self,
        session: AsyncSession | None,
        connection: Connection | None = None,
        driver: psycopg.AsyncConnection[Any] | None = None,
        engine: AsyncEngine | None = None,
        *,
        on_primary: bool = True,
    ) -> None:
        self._session = session
        self._connection = connection
        self._driver = driver
        self._engine = engine
        self.on_primary = on_primary  # False: a replica's session

    @property
    def own_session(self) -> AsyncSession | None:
        return self._session

    def session(self) -> AsyncSession:
        """An ORM session on this read's connection: its own session where it has one, else a new session bound to
        its connection (autocommit: the session's transaction sends nothing; closing it leaves the connection open)."""
        if self._session is not None:
            return self._session
        assert self._connection is not None and self._engine is not None
        return AsyncSession(bind=AsyncConnection(self._engine, self._connection), expire_on_commit=False)

    async def rows(self, statement: TextClause, params: Mapping[str, Any] = NO_PARAMS) -> list[Any]:
        """The statement's rows as named tuples (`rows`)."""
        if self._session is not None:
            return await rows(self._session, statement, params)
        assert self._connection is not None and self._driver is not None
        return await execute(self._connection, self._driver, statement, params)

    async def maps(self, statement: TextClause, params: Mapping[str, Any] = NO_PARAMS) -> list[dict[str, Any]]:
        """The statement's rows as dicts, keys in column order (`.mappings().all()` as plain dicts)."""
        return [row._asdict() for row in await self.rows(statement, params)]
