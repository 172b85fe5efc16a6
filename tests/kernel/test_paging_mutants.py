"""Keyset paging as a client meets it: the limit clamp, the cursors we issue and the ones we refuse, where a page
ends and where the next one starts (the mutation run of bench/mutation.py holds app/kernel/paging.py to these)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import BigInteger, column, select, table, text

from app.kernel.paging import (
    DEFAULT_PAGE,
    MAX_PAGE,
    InvalidCursor,
    Page,
    after_keyset,
    clamp_limit,
    cursor_params,
    decode_cursor,
    decode_id_cursor,
    encode_cursor,
    encode_id_cursor,
    id_range_page,
    id_range_select,
    id_range_statements,
    keyset_page,
    stream_entries,
    time_id_cursor,
)
from app.kernel.sql import compiled

AT = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)


def _raw(value: Any) -> str:
    """A cursor-shaped string around any JSON value (what a client could forge)."""
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def test_limit_is_clamped_into_one_to_the_maximum() -> None:
    assert (DEFAULT_PAGE, MAX_PAGE) == (1_000, 5_000)
    assert clamp_limit(None) == DEFAULT_PAGE
    assert clamp_limit(None, 50, default=20) == 20
    assert clamp_limit(0) == 1
    assert clamp_limit(-5) == 1
    assert clamp_limit(1) == 1
    assert clamp_limit(2) == 2
    assert clamp_limit(MAX_PAGE) == MAX_PAGE
    assert clamp_limit(MAX_PAGE + 1) == MAX_PAGE
    assert clamp_limit(99, 50) == 50
    assert clamp_limit(49, 50) == 49


def test_a_cursor_is_short_unpadded_url_safe_json_and_comes_back_as_issued() -> None:
    cursor = encode_cursor(AT, 42)
    assert cursor == base64.urlsafe_b64encode(b'["2026-03-04T05:06:07.890123+00:00",42]').decode()
    # whatever its length, no padding is sent
    assert all("=" not in encode_cursor(AT, n) for n in (1, 12, 123))
    assert json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))) == [AT.isoformat(), 42]
    assert decode_cursor(cursor) == (AT, 42)
    other_zone = AT.astimezone(timezone(timedelta(hours=-5)))
    assert decode_cursor(encode_cursor(other_zone, 7)) == (other_zone, 7)
    # 2**63 - 1 is the largest bigint id; padding is restored whatever the length
    for row_id in (1, 12, 123, 2**63 - 1):
        assert decode_cursor(encode_cursor(AT, row_id)) == (AT, row_id)


FORGED = [
    "",
    "x" * 201,
    "!!!!",  # not base64
    "bm90IGpzb24",  # base64 of "not json"
    _raw({"at": AT.isoformat(), "id": 1}),  # not a list
    _raw([AT.isoformat()]),
    _raw([AT.isoformat(), 1, 2]),
    _raw([1, 1]),  # the stamp is not a string
    _raw([AT.isoformat(), "1"]),
    _raw([AT.isoformat(), True]),  # bool is an int subclass
    _raw([AT.isoformat(), 1.0]),
    _raw([AT.isoformat(), 0]),
    _raw([AT.isoformat(), -3]),
    _raw([AT.isoformat(), 2**63]),
    _raw(["yesterday", 1]),
    _raw(["2026-03-04T05:06:07", 1]),  # no time zone
]


def test_a_cursor_we_never_issued_is_a_400_naming_the_cursor() -> None:
    for raw in FORGED:
        with pytest.raises(InvalidCursor) as info:
            decode_cursor(raw)
        assert info.value.status_code == 400, raw
        assert info.value.errors == {"cursor": ["is not a cursor this server issued"]}, raw


def test_a_cursor_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(InvalidCursor):
        decode_cursor(12)  # type: ignore[arg-type]


def _spaced(size: int) -> str:
    """A forged cursor of valid JSON padded with spaces to `size` bytes before base64."""
    body = json.dumps([AT.isoformat(), 1])
    return base64.urlsafe_b64encode((body[:-1] + " " * (size - len(body)) + "]").encode()).decode().rstrip("=")


def test_the_longest_accepted_cursor_is_two_hundred_characters() -> None:
    # a real cursor is far shorter; the bound only keeps the decoder's work small
    assert len(_spaced(150)) == 200
    assert decode_cursor(_spaced(150)) == (AT, 1)
    assert len(_spaced(151)) == 202
    with pytest.raises(InvalidCursor):
        decode_cursor(_spaced(151))


def test_id_cursors_are_the_epoch_and_refuse_time_cursors() -> None:
    cursor = encode_id_cursor(99)
    assert decode_cursor(cursor) == (datetime(1970, 1, 1, tzinfo=UTC), 99)
    assert decode_id_cursor(cursor) == 99
    assert encode_id_cursor("7") == encode_id_cursor(7)  # type: ignore[arg-type]
    with pytest.raises(InvalidCursor):
        decode_id_cursor(encode_cursor(AT, 99))
    with pytest.raises(InvalidCursor):
        decode_id_cursor("")


def test_cursor_params_bind_the_keyset_of_the_next_page() -> None:
    assert cursor_params(None) == {}
    assert cursor_params(encode_cursor(AT, 5)) == {"cursor_at": AT, "cursor_id": 5}
    with pytest.raises(InvalidCursor):
        cursor_params("")


def test_after_keyset_reads_rows_strictly_older_than_the_cursor() -> None:
    t = table("t", column("at"), column("id"))
    sql = str(select(t.c.id).where(after_keyset(t.c.at, t.c.id)))
    assert "(t.at, t.id) < (:cursor_at, :cursor_id)" in sql


def test_time_id_cursor_encodes_the_named_columns() -> None:
    cursor_of = time_id_cursor("made", "ident")
    assert decode_cursor(cursor_of({"made": AT, "ident": "8", "at": None, "id": 1})) == (AT, 8)
    with pytest.raises(AssertionError, match="made is the keyset timestamp"):
        cursor_of({"made": "2026-01-01", "ident": 1})


def test_a_page_ends_at_the_limit_and_points_after_its_last_row() -> None:
    rows = [10, 11, 12, 13]
    page: Page[int] = keyset_page(rows, 3, str)
    assert page == {"entries": [10, 11, 12], "next_cursor": "12"}
    assert rows == [10, 11, 12]  # trimmed in place
    assert keyset_page([10, 11, 12], 3, str) == {"entries": [10, 11, 12], "next_cursor": None}
    assert keyset_page([10, 11], 3, str) == {"entries": [10, 11], "next_cursor": None}
    assert keyset_page([], 1, str) == {"entries": [], "next_cursor": None}


def test_an_id_range_page_is_ascending_and_bounded_on_both_sides() -> None:
    t = table("t", column("id", BigInteger))
    base = select(t.c.id)
    open_ended = str(id_range_select(base, t.c.id, bounded=False))
    assert "t.id > :after_id" in open_ended
    assert "before_id" not in open_ended
    assert "ORDER BY t.id" in open_ended and "DESC" not in open_ended
    assert "LIMIT :fetch" in open_ended
    bounded = str(id_range_select(base, t.c.id, bounded=True))
    assert "t.id > :after_id AND t.id < :before_id" in bounded
    statements = id_range_statements({"ids": base}, t.c.id)
    assert set(statements) == {("ids", False), ("ids", True)}
    assert statements["ids", False].text == compiled(id_range_select(base, t.c.id, bounded=False)).text
    assert statements["ids", True].text == compiled(id_range_select(base, t.c.id, bounded=True)).text


# the statements of an ascending-id list over 1..12 (no table: these tests write nothing)
_SERIES = {
    ("n", False): text("SELECT g FROM generate_series(1, 12) g WHERE g > :after_id ORDER BY g LIMIT :fetch"),
    ("n", True): text(
        "SELECT g FROM generate_series(1, 12) g WHERE g > :after_id AND g < :before_id ORDER BY g LIMIT :fetch"
    ),
}


async def _ids(**kwargs: Any) -> tuple[list[int], str | None]:
    page = await id_range_page(_SERIES, "n", **kwargs)
    return [row[0] for row in page["entries"]], page["next_cursor"]


async def test_id_range_pages_walk_the_range_once() -> None:
    first, cursor = await _ids(limit=5, cursor=None, after_id=0, before_id=None)
    assert first == [1, 2, 3, 4, 5]
    assert cursor is not None and decode_id_cursor(cursor) == 5
    second, cursor = await _ids(limit=5, cursor=cursor, after_id=0, before_id=None)
    assert second == [6, 7, 8, 9, 10]
    assert cursor is not None
    last, cursor = await _ids(limit=5, cursor=cursor, after_id=0, before_id=None)
    assert (last, cursor) == ([11, 12], None)
    assert await _ids(limit=5, cursor=None, after_id=3, before_id=7) == ([4, 5, 6], None)
    assert await _ids(limit=5, cursor=None, after_id=-9, before_id=3) == ([1, 2], None)
    # the cursor, not after_id, says where the next page starts
    assert await _ids(limit=2, cursor=encode_id_cursor(8), after_id=1, before_id=None) == (
        [9, 10],
        encode_id_cursor(10),
    )
    # the limit is clamped: 0 still shows one row
    assert await _ids(limit=0, cursor=None, after_id=0, before_id=None) == ([1], encode_id_cursor(1))


async def test_stream_entries_reads_every_page_from_the_cursor_on() -> None:
    pages: dict[str | None, Page[int]] = {
        None: {"entries": [1, 2], "next_cursor": "b"},
        "b": {"entries": [3], "next_cursor": "c"},
        "c": {"entries": [], "next_cursor": "d"},
        "d": {"entries": [4], "next_cursor": None},
    }
    asked: list[str | None] = []

    async def fetch(cursor: str | None) -> Page[int]:
        asked.append(cursor)
        return pages[cursor]

    assert [entry async for entry in stream_entries(fetch)] == [1, 2, 3, 4]
    assert asked == [None, "b", "c", "d"]
    assert [entry async for entry in stream_entries(fetch, "c")] == [4]
