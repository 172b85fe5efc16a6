"""The connection pools: per event loop and URL, one for transactions and one in autocommit for one-statement
reads and writes; their connect options (the statement cap, prepared statements and their plans, the dead-client
check) and the pool's checks of a connection the server closed (docs/scaling.md "Two pools")."""

from __future__ import annotations

import asyncio
import select
from typing import Any

import psycopg
import psycopg._queries
from sqlalchemy import Connection, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app.kernel.config import settings, transaction_pooling

_engines: dict[tuple[int, str, bool], AsyncEngine] = {}
CONNECT_TIMEOUT = 5  # seconds to open a connection (libpq connect_timeout): a silent host fails, then 503s
CLIENT_CHECK_MS = 1000
PREPARE_AFTER = 5  # uses of a statement on a connection before psycopg prepares it (its default; direct connections)
_statement_timeout = 0.0  # seconds; 0 = no cap (see limit_statements)

# psycopg converts a statement's placeholders once and keeps it (128 statements, least recent out) only when its
# text is at most 4 KiB; a report's last statement is 5-7 KiB, so each report split it again (50-85 us). Our
# statements are a fixed set, composed once (app.kernel.sql): keep them up to 64 KiB (bounded: 128 of them).
QUERY_CACHE_BYTES = 64 * 1024
assert hasattr(psycopg._queries, "MAX_CACHED_STATEMENT_LENGTH"), "psycopg renamed its statement-cache bound"
psycopg._queries.MAX_CACHED_STATEMENT_LENGTH = QUERY_CACHE_BYTES


def limit_statements() -> None:
    """Cap every SQL statement of this process's connections at DB_STATEMENT_TIMEOUT (the web server calls this
    as it starts: a page never waits on a runaway query; the CLI and the worker's long maintenance run without
    the cap). Applies to engines created afterwards."""
    global _statement_timeout
    _statement_timeout = settings().db_statement_timeout


def engine_for(url: str, *, autocommit: bool = False) -> AsyncEngine:
    """`url`'s pool for this event loop (pooled async connections belong to the loop that opened them). With
    `autocommit`, the pool of one-statement reads and writes (`db.reader()`, `db.statements()`): its connections are
    in autocommit from the start and plan their prepared statements as Postgres chooses (`plan_cache_mode=auto`), so
    a page's statements are not planned again at every request (docs/scaling.md "Two pools")."""
    key = (id(asyncio.get_running_loop()), url, autocommit)
    engine = _engines.get(key)
    if engine is None:
        cfg = settings()
        pooled = transaction_pooling()
        # Behind PgBouncer in transaction mode nothing is prepared (a prepared statement lives on one server
        # connection). On a direct connection psycopg prepares a statement from its PREPARE_AFTER-th use: Postgres
        # then skips parsing and analysing it each time (docs/benchmarks.md "Ingest capacity").
        connect_args: dict[str, object] = {
            "prepare_threshold": None if pooled else PREPARE_AFTER,
            "connect_timeout": CONNECT_TIMEOUT,
        }
        if not pooled:  # startup options, no extra round trip (a transaction pooler refuses them: see below)
            # a process killed mid-statement (OOM, SIGKILL) leaves its backend running the statement, holding its
            # locks, until it next writes to the socket; checked every second, it stops at once (docs/scaling.md).
            # In a transaction a prepared statement is still planned for its parameters each time
            # (force_custom_plan): a generic plan, chosen once for every pattern key, would serve a 12,000-instance
            # key as it serves a 1-instance one (docs/benchmarks.md "Ingest capacity"). The autocommit pool's
            # one-statement reads may keep a generic plan (docs/scaling.md "Two pools").
            plans = "auto" if autocommit else "force_custom_plan"
            options = [f"-c client_connection_check_interval={CLIENT_CHECK_MS}", f"-c plan_cache_mode={plans}"]
            if _statement_timeout > 0:
                options.append(f"-c statement_timeout={int(_statement_timeout * 1000)}")
            connect_args["options"] = " ".join(options)
        engine = create_async_engine(
            url,
            # DB_POOL_SIZE plus as many again, all kept once opened: an overflow connection was closed when given
            # back, so 32 concurrent requests opened and closed a connection (a Postgres backend) nearly per request
            pool_size=2 * cfg.db_pool_size,
            max_overflow=0,
            # a bounded wait for a free connection; sqlalchemy.exc.TimeoutError after it is a 503 (app.kernel.outages)
            pool_timeout=cfg.db_pool_timeout,
            # no pre-ping (a round trip on every checkout): `_closed_by_server` looks at the socket instead
            pool_pre_ping=False,
            connect_args=connect_args,
            **({"isolation_level": "AUTOCOMMIT"} if autocommit else {}),
        )
        if _statement_timeout > 0 and pooled:
            _cap_every_transaction(engine, int(_statement_timeout * 1000))
        event.listen(engine.sync_engine, "checkout", _refuse_closed)
        event.listen(engine.sync_engine, "handle_error", _drop_stale_prepared)
        _engines[key] = engine
    return engine


def _closed_by_server(connection: psycopg.AsyncConnection[Any]) -> bool:
    """An idle pooled connection the server has ended (a restart, `pg_terminate_backend`): its socket is readable
    (the server's last message and the end of the stream wait there) or gone. One `poll` system call, no round
    trip. A connection that died silently (a host gone without a word) is not seen here: its first statement
    fails, SQLAlchemy invalidates it and every connection pooled before it, and a public read that failed so runs
    once more (`RequestReads.retry`)."""
    if connection.closed or connection.broken:
        return True
    try:
        fd = connection.pgconn.socket
    except psycopg.OperationalError:
        return True
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))


def _refuse_closed(dbapi_connection: Any, record: Any, proxy: Any) -> None:
    # the pool's documented custom pessimistic check: DisconnectionError makes it open a fresh connection instead
    if _closed_by_server(dbapi_connection.driver_connection):
        raise sa_exc.DisconnectionError("the server closed this pooled connection")


def _drop_stale_prepared(context: ExceptionContext) -> None:
    """A schema change made while the process serves (a migration) that moves a prepared statement's result type
    fails that statement on every connection that prepared it, for good: count it as a lost connection, so the pool
    drops its connections (a public read that failed so runs once more: `RequestReads.retry`)."""
    error = context.original_exception
    if isinstance(error, psycopg.errors.FeatureNotSupported) and "cached plan must not change result type" in str(
        error
    ):
        context.is_disconnect = True


def _cap_every_transaction(engine: AsyncEngine, milliseconds: int) -> None:
    """Behind PgBouncer in transaction mode the next transaction may run on another server connection, and a
    session `SET` would stay on a connection other clients share: each transaction sets its own cap (`SET LOCAL`,
    one round trip more per transaction; `set_config(..., true)` is `SET LOCAL` with a parameter)."""

    @event.listens_for(engine.sync_engine, "begin")
    def cap(connection: Connection) -> None:
        connection.exec_driver_sql("SELECT set_config('statement_timeout', %s, true)", (str(milliseconds),))


async def dispose_engines(url: str | None = None) -> None:
    """Close this loop's pools (all of them, or only the one for `url`, e.g. a replica that goes away)."""
    loop_id = id(asyncio.get_running_loop())
    for key in [k for k in _engines if k[0] == loop_id and (url is None or k[1] == url)]:
        await _engines.pop(key).dispose()


WARM_SECONDS = 10.0  # the longest a starting process waits for its pool before it answers anyway


async def warm(url: str, connections: int, *, autocommit: bool = False) -> int:
    """Open `connections` of `url`'s pooled connections at once, before the process answers: a cold process met by
    a burst opened them one request at a time, each a Postgres backend's start in the request's time (issue 39,
    docs/scaling.md "A process answers warm"). Answers how many opened; a database lost meanwhile opens none (the
    process answers anyway, its requests 503 until it is back: `tarakan serve` checked it was there)."""
    pool = engine_for(url, autocommit=autocommit)
    opened = [pool.connect() for _ in range(connections)]
    try:
        async with asyncio.timeout(WARM_SECONDS):
            results = await asyncio.gather(*(c.start() for c in opened), return_exceptions=True)
    except TimeoutError:
        results = []
    finally:
        for connection in opened:
            if connection.sync_connection is not None:  # started: back to the pool, kept there
                await connection.close()
    return sum(1 for r in results if not isinstance(r, BaseException))
