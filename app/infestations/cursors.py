"""Opaque keyset cursors for the instance ledger and the repository satellites.

A cursor is url-safe base64 (no padding) of a compact JSON pair `[iso timestamp, id]`: the keyset of the last
row already shown. It carries no authority (any well-formed cursor only moves the start of a public list), so it
is not signed; anything that does not decode to exactly that shape is an `InvalidCursor` (400), never a 500.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Any

from app.kernel.errors import ValidationError

_MAX_CURSOR_LENGTH = 200


class InvalidCursor(ValidationError):
    """A malformed `cursor` parameter: the client sent something we never issued."""

    status_code = 400

    def __init__(self, message: str = "is not a cursor this server issued") -> None:
        super().__init__({"cursor": [message]})


def encode_cursor(at: datetime, row_id: int) -> str:
    raw = json.dumps([at.isoformat(), row_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(raw: str) -> tuple[datetime, int]:
    """The keyset `(timestamp, id)` of a cursor, or InvalidCursor."""
    if not isinstance(raw, str) or not raw or len(raw) > _MAX_CURSOR_LENGTH:
        raise InvalidCursor()
    try:
        decoded = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
        value = json.loads(decoded)
    except (binascii.Error, ValueError):
        raise InvalidCursor() from None
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str)):
        raise InvalidCursor()
    stamp, row_id = value
    # bool is an int subclass; a cursor id is a positive bigint
    if isinstance(row_id, bool) or not isinstance(row_id, int) or not 0 < row_id < 2**63:
        raise InvalidCursor()
    try:
        at = datetime.fromisoformat(stamp)
    except ValueError:
        raise InvalidCursor() from None
    if at.tzinfo is None:
        raise InvalidCursor()
    return at, row_id


def next_cursor(rows: list[dict[str, Any]], limit: int, *, at: str, row_id: str) -> str | None:
    """Rows were fetched with `limit + 1`: when the extra row came back there is a next page, which starts after
    the last row shown (the limit-th). Trims `rows` to `limit` in place."""
    if len(rows) <= limit:
        return None
    del rows[limit:]
    last = rows[-1]
    stamp, ident = last[at], last[row_id]
    assert isinstance(stamp, datetime) and isinstance(ident, int)
    return encode_cursor(stamp, ident)
