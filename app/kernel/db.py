"""Database sessions, replica routing and the one transaction helper every service uses (docs/architecture.md "The
kernel's rules in words": transactions); the engines are app.kernel.engines'."""

from __future__ import annotations

import asyncio
import contextvars
import os
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from datetime import UTC, datetime
from typing import Final

import psycopg
from sqlalchemy import MetaData
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.orm import DeclarativeBase
from sqlalchemy.util import greenlet_spawn

from app.kernel import aftercommit, outages
from app.kernel.config import settings, transaction_pooling
from app.kernel.driver import Reader as Reader  # re-exported: callers say db.Reader
from app.kernel.driver import rows as rows  # re-exported: callers say db.rows(session, statement, params)
from app.kernel.engines import dispose_engines as dispose_engines  # re-exported: callers say db.dispose_engines()
from app.kernel.engines import engine_for, warm
from app.kernel.engines import limit_statements as limit_statements  # re-exported: app.main calls db.limit_statements()
from app.kernel.metrics import REPLICA_CONFLICTS, REPLICA_FALLBACKS, REPLICA_LAG, REPLICA_SKIPS
from app.kernel.sql import Fragment, statement

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


REPLICA_RETRY_SECONDS = 5.0  # after a replica failure, public reads use the primary this long before trying again
_replica_down_until: dict[str, float] = {}
_open_transactions: contextvars.ContextVar[int] = contextvars.ContextVar("open_transactions", default=0)
# Set for the request right after a moderator's write, so it reads its own write from the primary.
_force_primary: contextvars.ContextVar[bool] = contextvars.ContextVar("force_primary", default=False)
# The replica's replayed takedown marker and lag are read again at most this often per process (and at once
# whenever the primary's marker is ahead of the last one seen): docs/scaling.md "Read replicas".
REPLICA_PROBE_SECONDS = 1.0
# The takedown fence: every takedown is an audited action, and every audit event is numbered at its commit, in commit
# order (`audit_events.fence`, app.kernel.audit), so a server that shows fence N holds every takedown numbered up to
# N. Not the audit id: ids follow allocation order, and of two overlapping takedowns the lower id can commit after the
# higher one was seen (docs/domain.md §12 decision 8). One end of a unique index, read once per request on the
# primary; also the render cache's version and the takedown-keyed caches' key (app.record.rendered, app.kernel.cache).
TAKEDOWN_FENCE: Final = Fragment("SELECT coalesce(max(fence), 0) FROM audit_events")
_TAKEDOWN_MARKER = TAKEDOWN_FENCE.statement()
# On the replica: its marker and its lag (0 while it has replayed all it received; else the time since its last
# replayed transaction; 0 on a server that is not in recovery)
_REPLICA_PROBE = statement(
    "SELECT ({fence}) AS marker,"
    " CASE WHEN NOT pg_is_in_recovery() THEN 0"
    " WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0"
    " ELSE coalesce(EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp()), 0) END AS lag",
    fence=TAKEDOWN_FENCE,
)


class ReplicaState:
    """What this process last saw of a replica: its replayed marker, its lag, and when (monotonic)."""

    __slots__ = ("lag", "marker", "probed_at")

    def __init__(self) -> None:
        self.marker = -1
        self.lag = 0.0
        self.probed_at = float("-inf")


_replicas: dict[str, ReplicaState] = {}


class RequestReads:
    """One request's replica fence: the primary's takedown marker, read at the request's first replica read; and
    whether a read of the request failed in a way that running it again on the primary answers (`retry`: a replica's
    recovery conflict, or a pooled connection found dead), which the middleware does once (app.kernel.security)."""

    __slots__ = ("marker", "retry")

    def __init__(self) -> None:
        self.marker: int | None = None
        self.retry = False


_request: contextvars.ContextVar[RequestReads | None] = contextvars.ContextVar("request_reads", default=None)


def utcnow() -> datetime:
    return datetime.now(UTC)


# (DATABASE_URL, DATABASE_REPLICA_URL) as found in the environment -> as `settings()` normalizes them: read at
# every call (tests and operators change them) without building every setting on each read of a request
_urls: dict[tuple[str, str | None], tuple[str, str | None]] = {}


def _database_urls() -> tuple[str, str | None]:
    """The primary's and the replica's URL (None: no replica)."""
    found = (os.environ.get("DATABASE_URL", ""), os.environ.get("DATABASE_REPLICA_URL") or None)
    urls = _urls.get(found)
    if urls is None:
        cfg = settings()  # raises ConfigError on a missing or malformed URL
        if len(_urls) > 16:
            _urls.clear()
        urls = _urls[found] = (cfg.database_url, cfg.database_replica_url)
    return urls


def engine() -> AsyncEngine:
    return engine_for(_database_urls()[0])


def autocommit_engine() -> AsyncEngine:
    """The primary's pool of one-statement reads and writes (`engine_for(..., autocommit=True)`): a read's
    connection without a session or a transaction (docs/scaling.md "Two pools")."""
    return engine_for(_database_urls()[0], autocommit=True)


class _Shared:
    """One task's shared read (`shared_reads()`): the `Reader` its first public read opened (None until then) and
    whether it reads the primary. Only the task that opened the block shares it: tasks it starts (`gather`) copy the
    context but read on their own connections, as one connection runs one statement at a time."""

    __slots__ = ("on_primary", "read", "stack", "task", "usable")

    def __init__(self, stack: AsyncExitStack) -> None:
        self.stack = stack
        self.task = asyncio.current_task()
        self.read: Reader | None = None
        self.on_primary = False
        self.usable = True  # False once a read on it failed: its connection may be gone

    def serves(self, *, replica: bool) -> bool:
        """Whether a read in this context may run on the shared connection: the same task, and the same routing (a
        read that must go to the primary never runs on a replica's connection; any read may run on the primary)."""
        if not self.usable or self.task is not asyncio.current_task():
            return False
        if self.read is None:  # the first read opens it, routed as it would route its own
            return replica or reads_use_primary()
        return self.on_primary or (replica and not reads_use_primary())

    async def open(self) -> Reader:
        if self.read is None:
            self.read = await self.stack.enter_async_context(_own_reader())
            self.on_primary = self.read.on_primary
        return self.read

    def failed(self, exc: BaseException) -> None:
        """A read on the shared connection raised: what its own reader would have done (the request's retry on the
        primary), and, for a failed statement, no more sharing (its connection may be gone; the error may be caught)."""
        if isinstance(exc, sa_exc.SQLAlchemyError | psycopg.Error | OSError):
            self.usable = False
        fence = _request.get()
        if fence is not None and (dead_connection(exc) or (not self.on_primary and recovery_conflict(exc))):
            fence.retry = True


_shared: contextvars.ContextVar[_Shared | None] = contextvars.ContextVar("shared_reads", default=None)


@asynccontextmanager
async def shared_reads() -> AsyncIterator[None]:
    """Within the block, this task's public reads (`reader()`, `read_session()` without a transaction) share one
    connection: the first read opens it (routed as `reader()` routes), and it goes back to the pool when the block
    ends. A block that reads nothing costs no connection. Behind a transaction pooler every read keeps its own
    transaction (see `_AUTOCOMMIT`), so nothing is shared there."""
    if _shared.get() is not None or transaction_pooling():
        yield
        return
    async with AsyncExitStack() as stack:
        token = _shared.set(_Shared(stack))
        try:
            yield
        finally:
            _shared.reset(token)


@asynccontextmanager
async def reader() -> AsyncIterator[Reader]:
    """A public read (`read_session()`'s routing, outage and retry handling) whose statements go through the
    driver: `async with db.reader() as read: rows = await read.maps(STATEMENT, params)`. Without a replica in use
    and behind no transaction pooler, a pooled connection of the primary in autocommit, no ORM session. Within
    another reader or `shared_reads()` of the same task, the connection that one opened (its routing, see
    `_Shared.serves`)."""
    shared = _shared.get()
    if shared is not None and shared.serves(replica=True):
        read = await shared.open()
        try:
            yield read
        except Exception as exc:
            shared.failed(exc)
            raise
        return
    if shared is not None or transaction_pooling():  # another task's, routed elsewhere, or behind a pooler
        async with _own_reader() as read:
            yield read
        return
    async with shared_reads(), reader() as read:  # the outermost: its reads and those within share its connection
        yield read


@asynccontextmanager
async def _own_reader() -> AsyncIterator[Reader]:
    """`reader()` on a connection of its own."""
    if transaction_pooling() or not reads_use_primary():
        async with _read_session(replica=True, transaction=False) as session:
            yield Reader(session, on_primary=session.bind is engine())
        return
    try:
        async with _primary_autocommit() as read:
            yield read
    except Exception as exc:
        fence = _request.get()
        if fence is not None and dead_connection(exc):
            fence.retry = True  # the request runs once more, on the primary (app.kernel.security)
        raise


@asynccontextmanager
async def _primary_autocommit() -> AsyncIterator[Reader]:
    """A `Reader` on a pooled connection of the primary in autocommit (`autocommit_engine()`), checked out and
    given back in one hop through SQLAlchemy's greenlet each: not an `AsyncConnection`, whose start and shielded
    close cost twice the CPU (docs/scaling.md "Two pools")."""
    pool = autocommit_engine()
    connection = await greenlet_spawn(pool.sync_engine.connect)
    try:
        yield Reader(None, connection, connection.connection.driver_connection, pool)
    finally:
        await greenlet_spawn(connection.close)


async def warm_pools() -> int:
    """Open the primary's pools (and the replica's) before the process answers (`app.kernel.engines.warm`): the
    autocommit pool too where public reads use it (no transaction pooler)."""
    connections = settings().db_pool_size
    opened = sum([await warm(url, connections) for url in dict.fromkeys(_database_urls()) if url is not None])
    if not transaction_pooling():
        opened += await warm(_database_urls()[0], connections, autocommit=True)
    return opened


# A read's statements each commit on their own (no BEGIN, no ROLLBACK: one round trip per statement). Under READ
# COMMITTED every statement takes its own snapshot anyway, so nothing a read sees changes; reads that need a
# transaction block (`SET LOCAL`, a savepoint) ask for one (`read_session(transaction=True)`). Behind a transaction
# pooler the statement cap is set per transaction, so there every read keeps its transaction.
_AUTOCOMMIT: Final = {"isolation_level": "AUTOCOMMIT"}


def _read_options(transaction: bool) -> dict[str, str]:
    return {} if transaction or transaction_pooling() else _AUTOCOMMIT


async def _open_read(session: AsyncSession, *, transaction: bool) -> None:
    """Check out the read's connection, in autocommit unless the read needs a transaction (see `_AUTOCOMMIT`)."""
    await session.connection(execution_options=_read_options(transaction))


def use_primary_for_reads() -> contextvars.Token[bool]:
    """Route this context's replica reads to the primary; returns the token that `reset_primary_reads` takes."""
    return _force_primary.set(True)


def reset_primary_reads(token: contextvars.Token[bool]) -> None:
    _force_primary.reset(token)


@contextmanager
def request_reads() -> Iterator[RequestReads]:
    """One request's reads share one fence (the primary's takedown marker is read once per request, not per read)."""
    fence = RequestReads()
    token = _request.set(fence)
    try:
        yield fence
    finally:
        _request.reset(token)


def reads_use_primary() -> bool:
    """True when a replica read in this context would go to the primary anyway (no replica, or forced)."""
    return _database_urls()[1] is None or _force_primary.get()


@contextmanager
def primary_reads() -> Iterator[None]:
    """Within the block, replica reads go to the primary (read-your-writes); the previous routing comes back after,
    also when the block runs in the caller's own task (an in-process ASGI client)."""
    token = use_primary_for_reads()
    try:
        yield
    finally:
        reset_primary_reads(token)


def in_transaction() -> bool:
    return _open_transactions.get() > 0


@asynccontextmanager
async def transaction() -> AsyncIterator[AsyncSession]:
    """One unit of work on the primary: commits on success, rolls back on any exception. The outermost one runs
    its after-commit steps once it has committed (and drops them on rollback)."""
    maker = async_sessionmaker(engine(), expire_on_commit=False)
    steps_token = None if in_transaction() else aftercommit.open_steps()
    token = _open_transactions.set(_open_transactions.get() + 1)
    try:
        async with maker() as session, session.begin():
            yield session
    finally:
        _open_transactions.reset(token)
        steps = [] if steps_token is None else aftercommit.close_steps(steps_token)
    await aftercommit.run_steps(steps)  # reached only after the commit: an exception skips it


@asynccontextmanager
async def statement_session() -> AsyncIterator[AsyncSession]:
    """A session on the primary for a single write statement that needs no transaction block around it (one
    statement is atomic on its own): in autocommit, so it costs one round trip, not BEGIN + statement + COMMIT.
    Behind a transaction pooler (see `_AUTOCOMMIT`) it is an ordinary `transaction()`. Nothing runs after commit
    here: a write that schedules after-commit steps uses `transaction()`."""
    if transaction_pooling():
        async with transaction() as session:
            yield session
        return
    async with async_sessionmaker(engine(), expire_on_commit=False)() as session:
        await session.connection(execution_options=_AUTOCOMMIT)
        try:
            yield session
        finally:
            session.expunge_all()  # objects read here stay usable after the session ends
            await session.rollback()  # ends the session's (autocommit) connection use; nothing to undo


@asynccontextmanager
async def statements() -> AsyncIterator[Reader]:
    """`statement_session()` for SQL text sent by psycopg (`Reader.rows`), without an ORM session (0.12 ms of CPU
    to check a connection out and return it, a session's 0.3 ms): each statement on a pooled connection of the
    primary in autocommit; behind a transaction pooler, in a `transaction()`."""
    if transaction_pooling():
        async with transaction() as session:
            yield Reader(session)
        return
    async with _primary_autocommit() as primary:
        yield primary


async def takedown_fence(session: AsyncSession) -> int:
    """The newest takedown `session`'s server has committed (0 when none): see `TAKEDOWN_FENCE`."""
    return int((await session.execute(_TAKEDOWN_MARKER)).scalar_one())


async def _primary_marker() -> int:
    """The primary's newest takedown marker, once per request (every call outside a request)."""
    fence = _request.get()
    if fence is not None and fence.marker is not None:
        return fence.marker
    async with async_sessionmaker(engine(), expire_on_commit=False)() as session:
        await _open_read(session, transaction=False)
        marker = await takedown_fence(session)
        await session.rollback()
    if fence is not None:
        fence.marker = marker
    return marker


async def _probe(session: AsyncSession, state: ReplicaState) -> None:
    row = (await session.execute(_REPLICA_PROBE)).one()
    state.marker, state.lag, state.probed_at = int(row.marker), float(row.lag), time.monotonic()
    REPLICA_LAG.set(state.lag)


async def _replica_or_primary(*, transaction: bool) -> tuple[AsyncSession, bool]:
    """A session on the replica while it is fresh enough (its connection checked out, see `_open_read`), else a
    session on the primary not yet connected; and whether it is the replica.

    Fresh enough: it has replayed the primary's newest takedown (so a takedown holds at the next request whatever
    the lag; counted `behind_takedown` when not) and lags at most DATABASE_REPLICA_MAX_LAG (`lagging`). A replica
    that does not answer is counted in `tarakan_replica_fallbacks_total` and left alone for REPLICA_RETRY_SECONDS
    so reads do not wait on it each time."""
    primary_url, url = _database_urls()
    assert url is not None
    primary = async_sessionmaker(engine(), expire_on_commit=False)
    if url == primary_url:  # a "replica" that is the primary has nothing to fall back to
        return primary(), False
    cfg = settings()
    if time.monotonic() < _replica_down_until.get(url, 0.0):
        REPLICA_FALLBACKS.inc()
        return primary(), False
    marker = await _primary_marker()
    state = _replicas.setdefault(url, ReplicaState())
    known = time.monotonic() - state.probed_at < REPLICA_PROBE_SECONDS
    if known and state.marker >= marker and state.lag > cfg.database_replica_max_lag:
        REPLICA_SKIPS.labels(reason="lagging").inc()
        return primary(), False
    session = async_sessionmaker(engine_for(url), expire_on_commit=False)()
    try:
        await _open_read(session, transaction=transaction)
        if not (known and state.marker >= marker):
            await _probe(session, state)
    except Exception as exc:
        await session.close()
        if outages.dependency_of(exc) != outages.DATABASE:
            raise
        outages.record(outages.DATABASE, exc, source="replica")
        _replica_down_until[url] = time.monotonic() + REPLICA_RETRY_SECONDS
        REPLICA_FALLBACKS.inc()
        return primary(), False
    if state.marker < marker or state.lag > cfg.database_replica_max_lag:
        await session.close()
        REPLICA_SKIPS.labels(reason="behind_takedown" if state.marker < marker else "lagging").inc()
        return primary(), False
    return session, True


async def probe_replica() -> float | None:
    """Read the replica's lag now (for /metrics): seconds, or None without a separate replica or when it does not
    answer (which leaves the gauge as it was)."""
    cfg = settings()
    url = cfg.database_replica_url
    if url is None or url == cfg.database_url:
        return None
    state = _replicas.setdefault(url, ReplicaState())
    try:
        async with async_sessionmaker(engine_for(url), expire_on_commit=False)() as session:
            await _open_read(session, transaction=False)
            await _probe(session, state)
            await session.rollback()
    except Exception as exc:
        if outages.dependency_of(exc) != outages.DATABASE:
            raise
        outages.record(outages.DATABASE, exc, source="replica")
        return None
    return state.lag


def forget_replicas() -> None:
    """Forget what this process saw of its replicas (tests)."""
    _replicas.clear()
    _replica_down_until.clear()


def recovery_conflict(exc: BaseException) -> bool:
    """A hot standby canceled the statement (or ended the connection) to replay what the primary changed."""
    orig = exc.orig if isinstance(exc, sa_exc.DBAPIError) else exc
    return isinstance(orig, psycopg.Error) and "conflict with recovery" in str(orig)


def dead_connection(exc: BaseException) -> bool:
    """A statement failed because its connection was gone (SQLAlchemy recognised a disconnect and invalidated the
    connection, and with it every connection pooled before it): a pooled connection that outlived a restart."""
    return isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated


_makers: dict[AsyncEngine, async_sessionmaker[AsyncSession]] = {}


def _read_sessions(bound: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    """The read sessions' factory of an engine, built once (a factory a read cost a tenth of a session's CPU)."""
    maker = _makers.get(bound)
    if maker is None:
        if len(_makers) > 16:  # engines of event loops that ended (tests)
            _makers.clear()
        maker = _makers[bound] = async_sessionmaker(bound, expire_on_commit=False)
    return maker


@asynccontextmanager
async def read_session(*, replica: bool = True, transaction: bool = False) -> AsyncIterator[AsyncSession]:
    """A short read-only session (public reads may go to the replica while it is fresh enough, else the primary).
    Its statements run in autocommit unless `transaction` (a read that uses `SET LOCAL` or a savepoint): see
    `_AUTOCOMMIT`. Within a `reader()` or `shared_reads()` of the same task, and routed as it (`_Shared.serves`), a
    read without a transaction runs on that block's connection.

    A read that hits a recovery conflict on the replica, or a pooled connection that died (no pre-ping: see
    `engine_for`), marks the request for one more run on the primary (app.kernel.security): after a Postgres
    restart, a GET costs no failure; the first statement on each dead connection still fails elsewhere (writes)."""
    found = None if transaction else _shared.get()
    if found is not None and found.serves(replica=replica):
        read = await found.open()
        session = read.session()
        try:
            yield session
        except Exception as exc:
            found.failed(exc)
            raise
        finally:
            session.expunge_all()  # as below; a session of its own on the shared connection is closed
            if session is not read.own_session:
                await session.close()
        return
    async with _read_session(replica=replica, transaction=transaction) as session:
        yield session


@asynccontextmanager
async def _read_session(*, replica: bool, transaction: bool) -> AsyncIterator[AsyncSession]:
    """`read_session()` on a connection of its own."""
    on_replica = False
    try:
        if replica and not reads_use_primary():
            opened, on_replica = await _replica_or_primary(transaction=transaction)
        else:
            opened = _read_sessions(engine())()
        async with opened as session:
            try:
                if not on_replica:
                    await _open_read(session, transaction=transaction)
                yield session
            finally:
                # objects read here stay usable after the session ends; closing it (`async with`) rolls back and
                # hands the connection back (a rollback of its own first cost one more hop through the greenlet)
                session.expunge_all()
    except Exception as exc:
        conflict = on_replica and recovery_conflict(exc)
        if conflict:
            REPLICA_CONFLICTS.inc()
        fence = _request.get()
        if fence is not None and (conflict or dead_connection(exc)):
            fence.retry = True  # the request runs once more, on the primary (app.kernel.security)
        raise


_SELECT_ONE: Final = statement("SELECT 1")


async def ping() -> None:
    """One `SELECT 1` where a public read would go (`reader()`): raises (an outage, app.kernel.outages) when it
    cannot answer. Streamed documents call it before they send their 200 (docs/reliability.md)."""
    async with reader() as read:
        await read.rows(_SELECT_ONE)
