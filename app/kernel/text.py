"""Text hygiene at the edge: no NUL, control characters or unpaired surrogates in any text, and ASCII-only integers
(docs/security.md "Limits")."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from itertools import chain
from typing import Any

from app.kernel.errors import ValidationError

UNCLEAN_MESSAGE = "must not contain NUL, control characters or unpaired surrogates"

_UNCLEAN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
_UNCLEAN_IN_VALUE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")  # a single-line value: no tab or newline
_ASCII_DIGITS = re.compile(r"[0-9]{1,18}")  # up to 18 digits always fits a PostgreSQL bigint


def is_clean(value: str, *, single_line: bool = False) -> bool:
    """True when `value` breaks no rule above (`single_line`: tab, line feed and carriage return too)."""
    return (_UNCLEAN_IN_VALUE if single_line else _UNCLEAN).search(value) is None


def optional_text(
    body: Mapping[str, Any],
    field: str,
    maximum: int,
    errors: dict[str, list[str]],
    *,
    trim: bool,
    single_line: bool = False,
) -> str | None:
    """`body[field]`: absent or empty is None; not a string, unclean or longer than `maximum` is None with an error
    naming the field (`trim`: stripped first; `single_line`: no tab or line break either)."""
    value = body.get(field)
    if value is None:
        return None
    if not isinstance(value, str):
        errors[field] = ["must be a string"]
        return None
    if not is_clean(value, single_line=single_line):
        errors[field] = [UNCLEAN_MESSAGE + (", tabs or line breaks" if single_line else "")]
        return None
    if trim:
        value = value.strip()
    if value == "":
        return None
    if len(value) > maximum:
        errors[field] = [f"must be at most {maximum} characters"]
        return None
    return value


def require_clean(fields: Mapping[str, str | None]) -> None:
    """A 422 naming every field whose text breaks the rule."""
    errors = {name: [UNCLEAN_MESSAGE] for name, value in fields.items() if value is not None and not is_clean(value)}
    if errors:
        raise ValidationError(errors)


def first_unclean(value: Any, path: str = "") -> str | None:
    """The path (`a.b[2]`) of the first string, key or value, in a parsed JSON value that breaks the rule."""
    if is_clean("".join(strings_of(value))):
        return None  # the usual case, in one pass of the pattern and without building a path per string
    for at, text in walk_strings(value, path):
        if not is_clean(text):
            return at
    return None


def strings_of(value: Any) -> list[str]:
    """The strings of `walk_strings`, in the same order, without their paths: a tight loop for the usual case
    (a 2 MB document of 300,000 short strings costs tens of milliseconds, not a second)."""
    found: list[str] = []
    stack: list[Iterator[Any]] = [iter((value,))]
    while stack:
        for item in stack[-1]:
            if isinstance(item, str):
                found.append(item)
            elif isinstance(item, dict):
                stack.append(chain.from_iterable(item.items()))  # each key, then its value
                break
            elif isinstance(item, list):
                stack.append(iter(item))
                break
        else:
            stack.pop()
    return found


def walk_strings(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """Every string of a parsed JSON value, keys included (a key is named by its object's path), in document
    order; iterative, so depth costs no stack."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, str):
            yield at, item
        elif isinstance(item, dict):
            children: list[tuple[Any, str]] = []
            for key, child in item.items():
                children.append((key, at))
                children.append((child, f"{at}.{key}" if at else str(key)))
            stack.extend(reversed(children))
        elif isinstance(item, list):
            stack.extend(reversed([(child, f"{at}[{index}]") for index, child in enumerate(item)]))


def ascii_int(raw: str | None) -> int | None:
    """`raw` as a non-negative integer when it is 1-18 ASCII digits, else None (`"²".isdigit()` is true, but it is
    not a number `int()` reads)."""
    if raw is None or not _ASCII_DIGITS.fullmatch(raw):
        return None
    return int(raw)
