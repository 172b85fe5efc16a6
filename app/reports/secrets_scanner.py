"""Refuse reports, checks and statements that carry live credentials, naming the field and the kind, never the secret
(docs/domain.md §9); linear-time patterns under a time budget (docs/security.md "Decisions")."""

from __future__ import annotations

import bisect
import time
from itertools import accumulate, islice
from typing import Any

import regex

from app.kernel.errors import ValidationError
from app.kernel.text import strings_of, walk_strings
from app.reports.validation import document_field

# seconds one `scan_fields` call may spend matching (a 2 MB report of the worst known shape takes ~0.3 s)
SCAN_BUDGET_SECONDS = 0.75

PATTERNS: tuple[tuple[str, regex.Pattern[str]], ...] = (
    ("a private key", regex.compile(r"-----BEGIN (?:[A-Z0-9]{1,32}+ ){0,8}PRIVATE KEY-----")),
    ("an AWS access key id", regex.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("a GitHub token", regex.compile(r"\bgh[pousr]_[A-Za-z0-9]{30}")),
    ("a GitHub token", regex.compile(r"\bgithub_pat_[A-Za-z0-9_]{22}")),
    ("a Slack token", regex.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10}")),
    ("a Google API key", regex.compile(r"\bAIza[0-9A-Za-z_-]{35}")),
    ("a Stripe live key", regex.compile(r"\bsk_live_[0-9A-Za-z]{16}")),
    (
        "a JSON Web Token",
        regex.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}+\.eyJ[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8}"),
    ),
    (
        "a credential assignment",
        regex.compile(
            r"(?i)\b(?:api_key|secret_key|access_token|private_key)\b[\"']?\s{0,16}+[:=]\s{0,16}+[\"']?"
            r"[A-Za-z0-9_\-+/=.]{24}"
        ),
    ),
)

# Joins the strings of one field for a single pass: no pattern matches across it (NUL is in no character class,
# is not whitespace, and starts a run for the token pattern like the start of a string does).
_SEPARATOR = "\x00"


class ScanTimeout(Exception):
    """The budget ran out before the text was scanned."""


class ScanTimedOut(ValidationError):
    """`scan_fields`' 422 when its budget ran out (a batch tells it from a secret found: app/reports/batch.py)."""


def _search(pattern: regex.Pattern[str], text: str, deadline: float) -> regex.Match[str] | None:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise ScanTimeout
    try:
        return pattern.search(text, timeout=remaining, concurrent=True)
    except TimeoutError:
        raise ScanTimeout from None


def find_secret(text: str, *, deadline: float | None = None) -> str | None:
    """The kind of the first secret found in `text` (in pattern order), or None."""
    if deadline is None:
        deadline = time.monotonic() + SCAN_BUDGET_SECONDS
    for kind, pattern in PATTERNS:
        if _search(pattern, text, deadline):
            return kind
    return None


def _first_secret(strings: list[str], deadline: float) -> tuple[int, str] | None:
    """(index, kind) of the first string carrying a secret. One pass per pattern over the joined strings; the
    earliest match names the string, which is then judged alone (its first kind in pattern order)."""
    if not strings:
        return None
    starts = list(accumulate((len(text) + len(_SEPARATOR) for text in strings[:-1]), initial=0))
    joined = _SEPARATOR.join(strings)
    earliest: int | None = None
    for _, pattern in PATTERNS:
        match = _search(pattern, joined, deadline)
        if match is not None:
            index = bisect.bisect_right(starts, match.start()) - 1
            earliest = index if earliest is None else min(earliest, index)
    if earliest is None:
        return None
    kind = find_secret(strings[earliest], deadline=deadline)
    assert kind is not None
    return earliest, kind


def scan_fields(fields: dict[str, Any], *, budget: float = SCAN_BUDGET_SECONDS) -> None:
    """Raise a 422 naming the first field (per field, the first path inside it) that carries a secret, or that
    could not be scanned within `budget` seconds.

    `fields` maps a field name to its value; the value `document` is walked."""
    deadline = time.monotonic() + budget
    errors: dict[str, list[str]] = {}
    timed_out = False
    for name, value in fields.items():
        if value is None:
            continue
        # paths are built only for the string that carries a secret (a document may hold 300,000 short strings)
        strings = strings_of(value)
        try:
            found = _first_secret(strings, deadline)
        except ScanTimeout:
            errors[name] = ["could not be checked for secrets in time; send a smaller report"]
            timed_out = True
            break
        if found is not None:
            index, kind = found
            path = next(islice(walk_strings(value, "" if name == "document" else name), index, None))[0]
            field = document_field(path) if name == "document" else name
            errors[field] = [f"must not contain secrets (found what looks like {kind}; remove or redact it)"]
    if errors:
        raise (ScanTimedOut if timed_out else ValidationError)(errors)
