"""Control characters a client sends cannot forge or recolour a log line: the access line of a path with `%0A`,
`%0D` and `%1B` is still written, as one line, with those characters escaped (text and JSON formats)."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
from collections.abc import Iterator

import httpx
import pytest

from app.kernel.logs import log_handler

FORGED = "/no/such%0A2026-01-01 00:00:00,000 INFO tarakan.access: GET /admin 200%0D%1B[31mred"
DECODED = "/no/such\n2026-01-01 00:00:00,000 INFO tarakan.access: GET /admin 200\r\x1b[31mred"


@contextlib.contextmanager
def access_log_to(out: io.StringIO) -> Iterator[None]:
    """The access logger also writes to `out` through the handler the process configures (LOG_FORMAT)."""
    access = logging.getLogger("tarakan.access")
    handler, level = log_handler(out), access.level
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    try:
        yield
    finally:
        access.removeHandler(handler)
        access.setLevel(level)


@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_a_path_with_control_characters_is_logged_on_one_line_with_them_escaped(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch, log_format: str
) -> None:
    monkeypatch.setenv("LOG_FORMAT", log_format)
    out = io.StringIO()
    with access_log_to(out):
        response = await client.get(FORGED)
    assert response.status_code == 404
    lines = out.getvalue().splitlines()
    assert len(lines) == 1, lines  # the request is logged, and only once
    [line] = lines
    assert "\r" not in line and "\x1b" not in line
    if log_format == "text":
        assert " 404 " in line
        assert "/no/such\\x0a2026-01-01 00:00:00,000 INFO tarakan.access: GET /admin 200\\x0d\\x1b[31mred" in line
    else:
        entry = json.loads(line)
        assert entry["path"] == DECODED and entry["status"] == 404  # JSON keeps the value, escaped by its encoding
        assert "\\u001b[31mred" in line


def test_a_traceback_continues_its_record_on_indented_lines_with_controls_escaped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOG_FORMAT", "text")
    out = io.StringIO()
    handler = log_handler(out)
    try:
        raise ValueError("bad value\n2026-01-01 00:00:00,000 INFO forged: line\x1b[0m")
    except ValueError:
        record = logging.LogRecord("t", logging.ERROR, __file__, 1, "failed %s", ("x\ny",), sys.exc_info())
    handler.handle(record)
    first, *rest = out.getvalue().splitlines()
    assert first.endswith("ERROR t: failed x\\x0ay")
    assert rest and all(line.startswith(" ") for line in rest), rest
    # the message's own newline cannot start a record: its second line is indented like the rest
    assert "  2026-01-01 00:00:00,000 INFO forged: line\\x1b[0m" in rest
