"""Text hygiene at the edge, as the client sees it: which characters are refused, the error naming the field, the
path of the first unclean string of a document, ASCII-only integers (bench/mutation.py holds app/kernel/text.py to
these)."""

from __future__ import annotations

from typing import Any

import pytest

from app.kernel.errors import ValidationError
from app.kernel.text import (
    UNCLEAN_MESSAGE,
    ascii_int,
    first_unclean,
    is_clean,
    optional_text,
    require_clean,
    strings_of,
    walk_strings,
)


def test_control_characters_and_lone_surrogates_are_unclean() -> None:
    for bad in ["\x00", "a\x07b", "\x1b[31m", "\x7f", "\x85", "\ud800", "x\udfff"]:
        assert not is_clean(bad)
        assert not is_clean(bad, single_line=True)


def test_tabs_and_line_breaks_are_clean_only_in_multi_line_text() -> None:
    for whitespace in ("\t", "\n", "\r"):
        assert is_clean(f"a{whitespace}b")
        assert not is_clean(f"a{whitespace}b", single_line=True)
    assert is_clean("plain ünïcode ✓ 𝕏") and is_clean("plain", single_line=True)


def _optional(body: dict[str, Any], maximum: int = 5, **options: bool) -> tuple[str | None, dict[str, list[str]]]:
    errors: dict[str, list[str]] = {}
    value = optional_text(body, "note", maximum, errors, trim=options.pop("trim", False), **options)
    return value, errors


def test_optional_text_is_none_when_absent_or_empty() -> None:
    assert _optional({}) == (None, {})
    assert _optional({"note": None}) == (None, {})
    assert _optional({"note": ""}) == (None, {})
    assert _optional({"note": "   "}, trim=True) == (None, {})
    assert _optional({"other": "x"}) == (None, {})


def test_optional_text_names_the_field_and_the_rule() -> None:
    assert _optional({"note": 5}) == (None, {"note": ["must be a string"]})
    assert _optional({"note": "a\x00"}) == (None, {"note": [UNCLEAN_MESSAGE]})
    assert _optional({"note": "a\tb"}, single_line=True) == (
        None,
        {"note": [UNCLEAN_MESSAGE + ", tabs or line breaks"]},
    )
    assert _optional({"note": "abcdef"}) == (None, {"note": ["must be at most 5 characters"]})


def test_optional_text_keeps_the_value_trimmed_only_when_asked() -> None:
    assert _optional({"note": "abcde"}) == ("abcde", {})
    assert _optional({"note": " ab "}) == (" ab ", {})
    assert _optional({"note": " ab "}, trim=True) == ("ab", {})
    # the limit applies after trimming
    assert _optional({"note": "  abcde  "}, trim=True) == ("abcde", {})
    assert _optional({"note": "a\tb"}) == ("a\tb", {})


def test_require_clean_names_every_unclean_field() -> None:
    require_clean({"a": "fine", "b": None, "c": "multi\nline"})
    with pytest.raises(ValidationError) as info:
        require_clean({"a": "x\x00", "b": "fine", "c": "\x1b", "d": None})
    assert info.value.errors == {"a": [UNCLEAN_MESSAGE], "c": [UNCLEAN_MESSAGE]}


def test_first_unclean_names_the_path_of_the_first_bad_string() -> None:
    assert first_unclean({"a": ["fine", {"b": "fine"}]}) is None
    assert first_unclean({"a": ["fine", {"b": "x\x00"}]}) == "a[1].b"
    assert first_unclean(["ok", "ok", "\x07"]) == "[2]"
    assert first_unclean("\x00") == ""
    assert first_unclean("\x00", "body") == "body"
    assert first_unclean({"k\x00": "v"}) == ""  # a key is named by its object's path
    assert first_unclean({"o": {"k\x00": "v"}}) == "o"
    assert first_unclean({"a": "\x00", "b": "\x01"}) == "a"
    assert first_unclean({"x": {"y": "\x00"}}, "doc") == "doc.x.y"
    assert first_unclean([1, None, True, 2.5]) is None


DOCUMENT = {"a": ["s1", {"b": "s2", "c": [1, "s3"]}], "d": "s4", "e": {}, "f": [[], ["s5"]]}


def test_strings_come_in_document_order_keys_included() -> None:
    expected = ["a", "s1", "b", "s2", "c", "s3", "d", "s4", "e", "f", "s5"]
    assert strings_of(DOCUMENT) == expected
    assert [text for _, text in walk_strings(DOCUMENT)] == expected
    assert strings_of("x") == ["x"]
    assert strings_of(7) == []


def test_walk_strings_names_each_path() -> None:
    assert list(walk_strings(DOCUMENT, "doc")) == [
        ("doc", "a"),
        ("doc.a[0]", "s1"),
        ("doc.a[1]", "b"),
        ("doc.a[1].b", "s2"),
        ("doc.a[1]", "c"),
        ("doc.a[1].c[1]", "s3"),
        ("doc", "d"),
        ("doc.d", "s4"),
        ("doc", "e"),
        ("doc", "f"),
        ("doc.f[1][0]", "s5"),
    ]
    assert list(walk_strings({"k": "v"})) == [("", "k"), ("k", "v")]


ASCII_INTS = [
    ("0", 0),
    ("007", 7),
    ("123456789012345678", 123456789012345678),
    ("1234567890123456789", None),
    ("", None),
    ("-1", None),
    ("1.0", None),
    (" 1", None),
    ("²", None),
    ("١٢", None),
    (None, None),
]


def test_ascii_int_reads_one_to_eighteen_ascii_digits() -> None:
    assert [ascii_int(raw) for raw, _ in ASCII_INTS] == [value for _, value in ASCII_INTS]
