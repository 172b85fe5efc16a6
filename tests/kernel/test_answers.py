"""Typed answers (`app.kernel.answers`): sent in field order with timestamps as the code wrote them before, an
unset optional field left out, closed in their schema, and the schema's descriptions and examples as written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any, ClassVar

import msgspec
import pytest
from msgspec import Struct

from app.kernel.answers import UNSET, Answer, Timestamp, UnsetType, answer_response, iso, openapi_components


class Item(Answer):
    """A thing
    wrapped over two lines."""

    b: int
    a: Timestamp | None
    c: str | UnsetType = UNSET


class Body(Struct, kw_only=True):
    EXAMPLES: ClassVar[list[dict[str, Any]]] = [{"name": "x"}]

    name: str


def test_fields_are_sent_in_order_and_an_unset_one_is_left_out() -> None:
    at = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    response = answer_response(Item(b=1, a=iso(at)), status_code=201, headers={"Cache-Control": "no-store"})
    assert response.body == b'{"b":1,"a":"2026-11-30T12:00:00+00:00"}'  # isoformat, not msgspec's "Z"
    assert (response.status_code, response.headers["content-type"]) == (201, "application/json")
    assert answer_response(Item(b=1, a=None, c="x")).body == b'{"b":1,"a":null,"c":"x"}'


def test_iso_keeps_the_offset_and_microseconds() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=2)))
    assert iso(at) == "2026-01-02T03:04:05.000006+02:00" and iso(None) is None


def test_an_answer_is_closed() -> None:
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        msgspec.json.decode(b'{"b":1,"a":null,"extra":2}', type=Item)


def test_components_are_closed_described_on_one_line_and_carry_their_examples() -> None:
    schemas = openapi_components([Item, Body])
    assert schemas["Item"]["additionalProperties"] is False
    assert schemas["Item"]["required"] == ["b", "a"]
    assert schemas["Item"]["description"] == "A thing wrapped over two lines."
    assert "additionalProperties" not in schemas["Body"]  # a request body stays open
    assert schemas["Body"]["examples"] == [{"name": "x"}]
