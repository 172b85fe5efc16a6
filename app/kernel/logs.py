"""Logs an operator can use: one format, `LOG_FORMAT=json`, an access line and a request id per request
(docs/operations.md "Logs")."""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, TextIO

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import Message, Receive, Scope, Send

from app.kernel import watchdog
from app.kernel.asgi import HTTPMiddleware
from app.kernel.config import log_format
from app.kernel.metrics import route_template

REQUEST_ID_HEADER = "X-Request-ID"
_SANE_ID = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,128}$")
request_id: ContextVar[str | None] = ContextVar("request_id", default=None)
access_log = logging.getLogger("tarakan.access")

# extra fields a log call may carry (`log.info(..., extra={"route": ...})`), copied into the JSON object
_EXTRA_FIELDS = ("route", "method", "path", "status", "duration_ms", "job", "pattern_key", "in_flight")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


# C0 and C1 controls, DEL and the Unicode line separators: what a client sent (a `%0A` in a path is decoded before
# it is logged) can neither forge a log line nor recolour a terminal
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """`text` with every control character written as `\\xNN` (`\\uNNNN` for the line separators)."""
    return _CONTROL.sub(_escaped, text)


class TextFormatter(logging.Formatter):
    """TEXT_FORMAT, one line per record with its controls escaped; a traceback follows on lines that begin with
    whitespace, so a line that begins in column 0 always starts a record."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        record.message = record.getMessage()
        record.asctime = self.formatTime(record, self.datefmt)
        line = escape_controls(self.formatMessage(record))
        # never the cached `exc_text`: another handler may have formatted it unescaped
        for block in (
            self.formatException(record.exc_info) if record.exc_info else record.exc_text,
            self.formatStack(record.stack_info) if record.stack_info else None,
        ):
            if block:
                line += "".join("\n" + _continued(escape_controls(part)) for part in block.split("\n"))
        return line


def _continued(line: str) -> str:
    return line if line.startswith(" ") else "  " + line


class JsonFormatter(logging.Formatter):
    """time, level, logger, message, request_id (when serving one), the extra fields, and the traceback if any.
    One line per record: JSON escapes every control character but DEL, escaped here."""

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
        return json.dumps(entry, default=str).replace("\x7f", "\\u007f")


class _RequestIdText(logging.Filter):
    """Text format: append `[request_id]` to lines logged while serving a request."""

    def filter(self, record: logging.LogRecord) -> bool:
        rid = request_id.get()
        if rid and not getattr(record, "_tarakan_rid", False):
            record.msg = f"{record.msg} [request_id={rid}]"
            record._tarakan_rid = True
        return True


def log_handler(stream: TextIO | None = None) -> logging.Handler:
    """A handler writing to `stream` (default: stderr) in the format LOG_FORMAT asks for (`text` or `json`)."""
    handler = logging.StreamHandler(stream)
    if log_format() == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter())
        handler.addFilter(_RequestIdText())
    return handler


def configure_logging(level: int = logging.INFO) -> None:
    """One root handler on stderr in the format LOG_FORMAT asks for (`text`, the default, or `json`); every
    library's logger (uvicorn, arq, SQLAlchemy) propagates to it."""
    handler = log_handler()
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
            with watchdog.in_flight(lambda: f"{scope['method']} {route_template(scope)}"):
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
