"""Logs an operator can use: one format, `LOG_FORMAT=json`, an access line and a request id per request
(docs/operations.md "Logs")."""

from __future__ import annotations

import json
import logging
import os
import random
import re
import time
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, TextIO

from starlette.datastructures import MutableHeaders
from starlette.types import Message, Scope

from app.kernel.config import log_format, server_timing
from app.kernel.metrics import observe_request, route_template

REQUEST_ID_HEADER = "X-Request-ID"
_REQUEST_ID_KEY = REQUEST_ID_HEADER.lower().encode()
# minted request ids only correlate log lines: random per process, without a system call per request (uuid4 reads
# os.urandom every time)
_minted = random.Random(os.urandom(16))
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
        self._stamp: tuple[int, str] = (-1, "")  # the last second formatted (one tuple: threads log too)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        """logging's default stamp (`2026-12-04 05:30:27,123`), its second's part formatted once a second: a
        localtime and strftime per access line were a tenth of a /healthz request's logging."""
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        stamp = self._stamp
        if stamp[0] != second:
            stamp = self._stamp = (second, time.strftime(self.default_time_format, self.converter(record.created)))
        return f"{stamp[1]},{int(record.msecs):03d}"  # logging.Formatter.default_msec_format: %03d truncates

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
    # no record looks up its caller's file and line, thread or process (no format here prints them): the logging
    # HOWTO's "Optimization", a cost on every access line (docs/benchmarks.md "Public pages against /healthz")
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
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
    for name, value in scope["headers"]:
        if name == _REQUEST_ID_KEY:  # the first one, as Headers.get reads it
            given: str = value.decode("latin-1")
            if _SANE_ID.match(given):
                return given
            break
    return f"{_minted.getrandbits(128):032x}"


class RequestLog:
    """Everything said about one request (one clock): accept or mint the request id and return it in
    `X-Request-ID`; count and time the request to its last body byte (an exception counts as a 5xx:
    `tarakan_http_requests_total`, `tarakan_http_request_duration_seconds`); with SERVER_TIMING=1,
    `Server-Timing: app;dur=<ms>`, the server's time until the response headers (the whole render for a template
    page; off by default: it would tell anyone which requests are slow, a timing oracle); and one access line.
    Every line logged between its start and `close` carries the id."""

    __slots__ = ("rid", "scope", "started", "status", "timing", "token")

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.rid = _incoming_id(scope)
        self.token = request_id.set(self.rid)
        self.started = time.perf_counter()
        self.timing = server_timing()
        self.status = 500

    def describe(self) -> str:
        """The request for the watchdog's stall line (its route is known only after routing)."""
        return f"{self.scope['method']} {route_template(self.scope)}"

    def respond(self, message: Message) -> None:
        """On the `http.response.start` going out: its status, and the id (and timing) among its headers."""
        self.status = int(message["status"])
        headers = MutableHeaders(scope=message)
        headers[REQUEST_ID_HEADER] = self.rid
        if self.timing:
            headers.append("Server-Timing", f"app;dur={(time.perf_counter() - self.started) * 1000:.2f}")

    def close(self) -> None:
        scope, status = self.scope, self.status
        elapsed = time.perf_counter() - self.started
        route = route_template(scope)
        observe_request(route, scope["method"], status, elapsed)
        duration_ms = round(elapsed * 1000, 2)
        access_log.info(
            "%s %s %d %.2fms",
            scope["method"],
            scope["path"],
            status,
            duration_ms,
            extra={"method": scope["method"], "path": scope["path"], "route": route, "status": status,
                   "duration_ms": duration_ms},
        )  # fmt: skip
        request_id.reset(self.token)
