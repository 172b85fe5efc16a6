"""Keyset paging: one page shape, one cursor codec, one limit clamp (docs/architecture.md "The kernel's rules in
words")."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any, Generic, TypedDict, TypeVar

from sqlalchemy import ColumnElement, Row, Select, TextClause, bindparam, tuple_

from app.kernel import db
from app.kernel.errors import BadRequest, ValidationError
from app.kernel.sql import compiled
from app.kernel.text import ascii_int

DEFAULT_PAGE = 1_000
MAX_PAGE = 5_000  # the largest page any list reads in one statement (sitemap streams, bulk listings)

_MAX_CURSOR_LENGTH = 200
_EPOCH = datetime.fromisoformat("1970-01-01T00:00:00+00:00")

E = TypeVar("E")
R = TypeVar("R")


class Page(TypedDict, Generic[E]):
    entries: list[E]
    next_cursor: str | None


# The statements of a keyset-paged list: the first page (False) and the pages after a cursor (True).
Pages = dict[bool, TextClause]


class InvalidCursor(ValidationError):
    """A malformed `cursor` parameter: the client sent something we never issued."""

    status_code = 400

    def __init__(self, message: str = "is not a cursor this server issued") -> None:
        super().__init__({"cursor": [message]})


def strict_limit(raw: str | None, *, default: int, maximum: int) -> int:
    """A `limit` query parameter read strictly: absent is `default`; anything but ASCII digits from 1 to `maximum`
    is a 400 naming it."""
    if raw is None:
        return default
    value = ascii_int(raw)
    if value is None or not 1 <= value <= maximum:
        raise BadRequest({"limit": [f"must be an integer from 1 to {maximum}"]})
    return value


def clamp_limit(limit: int | None, maximum: int = MAX_PAGE, *, default: int = DEFAULT_PAGE) -> int:
    """`limit` within 1..maximum; None is `default`."""
    if limit is None:
        return default
    return max(1, min(int(limit), maximum))


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


def encode_id_cursor(row_id: int) -> str:
    """The cursor of a list keyed by id alone."""
    return encode_cursor(_EPOCH, int(row_id))


def decode_id_cursor(raw: str) -> int:
    """The id of an `encode_id_cursor` cursor, or InvalidCursor (a timestamp cursor is not an id cursor)."""
    at, row_id = decode_cursor(raw)
    if at != _EPOCH:
        raise InvalidCursor()
    return row_id


def after_keyset(*keyset: ColumnElement[Any]) -> ColumnElement[bool]:
    """`(keyset) < (:cursor_at, :cursor_id)`: a newest-first list ordered by `keyset` DESC, after the cursor's row
    (the statement of every page but the first; `cursor_params` binds it)."""
    return tuple_(*keyset) < tuple_(bindparam("cursor_at"), bindparam("cursor_id"))


def cursor_params(cursor: str | None) -> dict[str, Any]:
    """The parameters of `after_keyset` for `cursor` (none on the first page); InvalidCursor when malformed."""
    if cursor is None:
        return {}
    at, row_id = decode_cursor(cursor)
    return {"cursor_at": at, "cursor_id": row_id}


def time_id_cursor(at: str, row_id: str) -> Callable[[Mapping[str, Any]], str]:
    """`cursor_of` for rows keyed by `(timestamp, id)` under the given column names."""

    def cursor_of(row: Mapping[str, Any]) -> str:
        stamp, ident = row[at], row[row_id]
        assert isinstance(stamp, datetime), f"{at} is the keyset timestamp"
        return encode_cursor(stamp, int(ident))

    return cursor_of


def keyset_page(rows: list[R], limit: int, cursor_of: Callable[[R], str]) -> Page[R]:
    """The page of rows fetched with `limit + 1`: trims `rows` to `limit` in place and, when the extra row came
    back, sets `next_cursor` to `cursor_of(last row shown)`."""
    if len(rows) <= limit:
        return {"entries": rows, "next_cursor": None}
    del rows[limit:]
    return {"entries": rows, "next_cursor": cursor_of(rows[-1])}


def id_range_select(base: Select[Any], id_column: ColumnElement[int], *, bounded: bool) -> Select[Any]:
    """`base` as an ascending-id page: `:after_id < id` (`< :before_id` when bounded), `LIMIT :fetch`."""
    page = base.where(id_column > bindparam("after_id"))
    if bounded:
        page = page.where(id_column < bindparam("before_id"))
    return page.order_by(id_column).limit(bindparam("fetch"))


def id_range_statements(
    shapes: Mapping[str, Select[Any]], id_column: ColumnElement[int]
) -> dict[tuple[str, bool], TextClause]:
    """The statements of an ascending-id list, one per `(shape, bounded)`, compiled once; each shape is the list's
    select (its own select list) with `id_column` first."""
    return {
        (shape, bounded): compiled(id_range_select(base, id_column, bounded=bounded))
        for shape, base in shapes.items()
        for bounded in (False, True)
    }


def _first_column_cursor(row: Row[Any]) -> str:
    return encode_id_cursor(int(row[0]))


async def id_range_page(
    statements: Mapping[tuple[str, bool], TextClause],
    shape: str,
    *,
    limit: int,
    cursor: str | None,
    after_id: int,
    before_id: int | None,
) -> Page[Row[Any]]:
    """One page of an ascending-id list (the id is the first column) in one short read session: rows with
    `after_id < id < before_id` (None: no upper bound), continuing after `cursor` when given."""
    limit = clamp_limit(limit)
    start = decode_id_cursor(cursor) if cursor is not None else max(0, int(after_id))
    params = {"after_id": start, "before_id": before_id, "fetch": limit + 1}
    async with db.reader() as read:
        rows = await read.rows(statements[shape, before_id is not None], params)
    return keyset_page(rows, limit, _first_column_cursor)


async def stream_entries(
    fetch: Callable[[str | None], Awaitable[Page[E]]], cursor: str | None = None
) -> AsyncIterator[E]:
    """Every entry of a paged list, page after page from `cursor` (None: the start); `fetch` opens its own short
    read session per page, so a stream never holds one for its whole length."""
    while True:
        page = await fetch(cursor)
        for entry in page["entries"]:
            yield entry
        cursor = page["next_cursor"]
        if cursor is None:
            return
