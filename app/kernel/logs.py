"""Logs an operator can use (docs/operations.md "Logs"): one format for every process, `LOG_FORMAT=json` for one
JSON object per line, and a request id on every line logged while a request is served.

The web process logs one access line per request (`tarakan.access`: method, path, route template, status,
duration); uvicorn's own access log is turned off in its favour. The request id comes from the client's
`X-Request-ID` when it is a sane token (a load balancer's id then follows the request through our logs), else
a new one; either way it is returned in `X-Request-ID`.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import Message, Receive, Scope, Send

from app.kernel.asgi import HTTPMiddleware
from app.kernel.config import log_format
from app.kernel.metrics import route_template

REQUEST_ID_HEADER = "X-Request-ID"
_SANE_ID = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,128}$")
request_id: ContextVar[str | None] = ContextVar("request_id", default=None)
access_log = logging.getLogger("tarakan.access")

# extra fields a log call may carry (`log.info(..., extra={"route": ...})`), copied into the JSON object
_EXTRA_FIELDS = ("route", "method", "path", "status", "duration_ms", "job", "pattern_key")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """time, level, logger, message, request_id (when serving one), the extra fields, and the traceback if any."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        rid = getattr(record, "request_id", None) or request_id.get()
        if rid:
            entry["request_id"] = rid
        for name in _EXTRA_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class _RequestIdText(logging.Filter):
    """Text format: append `[request_id]` to lines logged while serving a request."""

    def filter(self, record: logging.LogRecord) -> bool:
        rid = request_id.get()
        if rid and not getattr(record, "_tarakan_rid", False):
            record.msg = f"{record.msg} [request_id={rid}]"
            record._tarakan_rid = True
        return True


def configure_logging(level: int = logging.INFO) -> None:
    """One root handler on stderr in the format LOG_FORMAT asks for (`text`, the default, or `json`); every
    library's logger (uvicorn, arq, SQLAlchemy) propagates to it."""
    handler = logging.StreamHandler()
    if log_format() == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
        handler.addFilter(_RequestIdText())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "arq"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
    logging.getLogger("alembic").setLevel(logging.WARNING)  # its INFO lines are per-migration chatter


def _configured_in_this_process() -> logging.Handler:
    configure_logging()
    return logging.NullHandler()  # dictConfig wants a handler back; the real one is on the root logger now


# uvicorn's `log_config` for `serve --workers N`: its server processes start afresh (spawn) and apply this with
# dictConfig, which runs `configure_logging` in each of them
PROCESS_LOG_CONFIG: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"tarakan": {"()": f"{__name__}._configured_in_this_process"}},
}


def _incoming_id(scope: Scope) -> str:
    given = Headers(scope=scope).get(REQUEST_ID_HEADER, "")
    return given if _SANE_ID.match(given) else uuid.uuid4().hex


class RequestIdMiddleware(HTTPMiddleware):
    """Accept or mint the request id, return it in `X-Request-ID`, and log one access line per request."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        rid = _incoming_id(scope)
        token = request_id.set(rid)
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                MutableHeaders(scope=message)[REQUEST_ID_HEADER] = rid
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            duration_ms = round((time.perf_counter() - started) * 1000, 2)
            access_log.info(
                "%s %s %d %.2fms",
                scope["method"],
                scope["path"],
                status,
                duration_ms,
                extra={
                    "method": scope["method"],
                    "path": scope["path"],
                    "route": route_template(scope),
                    "status": status,
                    "duration_ms": duration_ms,
                },
            )
            request_id.reset(token)
