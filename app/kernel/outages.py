"""Which failures mean Postgres or Redis is away (`dependency_of`), counted and logged once per interval (`record`):
docs/reliability.md."""

from __future__ import annotations

import logging
import threading
import time

import psycopg
from redis import exceptions as redis_exceptions
from sqlalchemy import exc as sa_exc

from app.kernel.metrics import DEPENDENCY_FAILURES

log = logging.getLogger("tarakan.outages")

DATABASE = "database"
REDIS = "redis"
LOG_INTERVAL = 10.0  # seconds between two log lines of one dependency and source

# What the web layer registers its 503 handler for (each is narrowed by `dependency_of`).
DATABASE_ERRORS: tuple[type[BaseException], ...] = (sa_exc.DBAPIError, sa_exc.TimeoutError, psycopg.Error)
REDIS_ERRORS: tuple[type[BaseException], ...] = (redis_exceptions.ConnectionError, redis_exceptions.TimeoutError)
OUTAGE_ERRORS = DATABASE_ERRORS + REDIS_ERRORS

_lock = threading.Lock()
_last_logged: dict[tuple[str, str], float] = {}
_suppressed: dict[tuple[str, str], int] = {}


def dependency_of(exc: BaseException) -> str | None:
    """`"database"`, `"redis"` or None (not an outage: a bug or a constraint, never a 503)."""
    if isinstance(exc, sa_exc.TimeoutError):  # QueuePool: no connection free within pool_timeout
        return DATABASE
    if isinstance(exc, sa_exc.DBAPIError):
        if exc.connection_invalidated:
            return DATABASE
        return dependency_of(exc.orig) if exc.orig is not None else None
    # psycopg's OperationalError covers refused/dropped connections, admin shutdown, "the database system is
    # starting up", statement timeouts (QueryCanceled) and deadlocks; InterfaceError a connection already closed
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return DATABASE
    if isinstance(exc, redis_exceptions.ConnectionError | redis_exceptions.TimeoutError):
        return REDIS
    return None


def record(dependency: str, exc: BaseException, *, source: str) -> None:
    """Count one failure; log it unless this dependency and source already logged within `LOG_INTERVAL`."""
    DEPENDENCY_FAILURES.labels(dependency=dependency, source=source).inc()
    key = (dependency, source)
    now = time.monotonic()
    with _lock:
        last = _last_logged.get(key)
        if last is not None and now - last < LOG_INTERVAL:
            _suppressed[key] = _suppressed.get(key, 0) + 1
            return
        _last_logged[key] = now
        more = _suppressed.pop(key, 0)
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    since = f" (+{more} more since the last line)" if more else ""
    log.warning("%s unavailable in %s: %s: %s%s", dependency, source, type(exc).__name__, detail[:300], since)


def reset_log_intervals() -> None:
    """Forget when each line was last logged (tests that assert on the log lines)."""
    with _lock:
        _last_logged.clear()
        _suppressed.clear()
