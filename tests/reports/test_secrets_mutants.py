"""The secrets scanner as a submitter meets it (docs/domain.md §9): the kind it names for each credential, the
field (and path inside the document) it names, the first one when several carry secrets, and the time budget
(bench/mutation.py holds app/reports/secrets_scanner.py to these). No database: scan_fields is pure."""

from __future__ import annotations

import time
from typing import Any

import pytest

from app.kernel.errors import ValidationError
from app.reports.secrets_scanner import SCAN_BUDGET_SECONDS, ScanTimeout, find_secret, scan_fields

KINDS = [
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow", "a private key"),
    ("AKIAIOSFODNN7EXAMPLE", "an AWS access key id"),
    ("ghp_" + "a1B2" * 9, "a GitHub token"),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "a GitHub token"),
    ("xoxb-123456789012-abcdefABCDEF", "a Slack token"),
    ("AIza" + "SyA-1234567890abcdefghijklmnopqrstu", "a Google API key"),
    ("sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc", "a Stripe live key"),
    (
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "a JSON Web Token",
    ),
    ("api_key = 'abcdefghijklmnopqrstuvwxyz0123'", "a credential assignment"),
]
AWS = "AKIAIOSFODNN7EXAMPLE"
STRIPE = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"


def _message(kind: str) -> str:
    return f"must not contain secrets (found what looks like {kind}; remove or redact it)"


def _refused(fields: dict[str, Any], **options: float) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as info:
        scan_fields(fields, **options)
    return info.value.errors


def test_each_kind_is_named() -> None:
    assert SCAN_BUDGET_SECONDS == 0.75
    for secret, kind in KINDS:
        assert find_secret(f"see {secret} here") == kind, secret
        assert _refused({"notes": f"see {secret} here"}) == {"notes": [_message(kind)]}, secret
    # the first kind in pattern order when one text carries two
    assert find_secret(f"{STRIPE} and {AWS}") == "an AWS access key id"
    assert find_secret("nothing to see") is None


def test_clean_fields_pass_and_absent_ones_are_skipped() -> None:
    scan_fields({"notes": "fine", "summary": None, "document": {"findings": [{"title": "ok"}]}})
    scan_fields({})


def test_the_field_and_the_path_inside_the_document_are_named() -> None:
    document = {"findings": [{"title": "ok"}, {"title": "fine", "description": f"key {AWS}"}], "meta": {"k": "v"}}
    assert _refused({"document": document}) == {"findings[1].description": [_message("an AWS access key id")]}
    assert _refused({"document": {"meta": {"k": STRIPE}}}) == {"document.meta.k": [_message("a Stripe live key")]}
    # a key is named by its object's path
    assert _refused({"document": {"meta": {STRIPE: "v"}}}) == {"document.meta": [_message("a Stripe live key")]}
    # a field other than the document is named as it is, even when its value is a list
    assert _refused({"notes": ["fine", f"x {AWS}"]}) == {"notes": [_message("an AWS access key id")]}


def test_every_field_with_a_secret_is_named_with_its_own_kind() -> None:
    assert _refused({"notes": f"x {STRIPE}", "title": "fine", "summary": f"y {AWS}"}) == {
        "notes": [_message("a Stripe live key")],
        "summary": [_message("an AWS access key id")],
    }


def test_the_first_string_with_a_secret_is_named_whatever_the_pattern_order() -> None:
    # the Stripe key (a later pattern) sits in an earlier string than the AWS key (an earlier pattern)
    strings = ["a", "bb", f"c {STRIPE}", "ddd", f"e {AWS}"]
    assert _refused({"document": {"findings": [{"title": s} for s in strings]}}) == {
        "findings[2].title": [_message("a Stripe live key")]
    }
    strings = [f"e {AWS}", "bb", f"c {STRIPE}"]
    assert _refused({"document": {"findings": [{"title": s} for s in strings]}}) == {
        "findings[0].title": [_message("an AWS access key id")]
    }
    # a secret right after a long string: the offsets of the joined text map it to its own string
    strings = ["x" * 1000, "y", AWS, "z"]
    assert _refused({"notes": strings}) == {"notes": [_message("an AWS access key id")]}
    assert _refused({"document": {"a": strings}}) == {"document.a[2]": [_message("an AWS access key id")]}
    # secrets never span two strings: the halves of a key in neighbouring strings are no key
    scan_fields({"notes": [AWS[:10], AWS[10:]]})
    scan_fields({"notes": ["AKIA", "IOSFODNN7EXAMPLE"]})


def test_a_field_that_cannot_be_scanned_in_time_is_refused_and_the_scan_stops() -> None:
    errors = _refused({"notes": "fine", "summary": "also fine", "title": f"x {AWS}"}, budget=0.0)
    assert errors == {"notes": ["could not be checked for secrets in time; send a smaller report"]}
    with pytest.raises(ScanTimeout):
        find_secret("anything", deadline=time.monotonic() - 1)
    # the deadline also bounds a single long match: a budget far shorter than one pass over a large text
    large = ("api_key=" + " " * 15) * 60_000
    started = time.monotonic()
    assert _refused({"notes": large}, budget=0.002) == {
        "notes": ["could not be checked for secrets in time; send a smaller report"]
    }
    assert time.monotonic() - started < 0.5


def test_secrets_are_found_in_strings_between_others() -> None:
    # the offsets of the joined text map a match to its own string wherever it sits among many short ones
    strings = ["a"] * 10 + [f"k {AWS}"] + ["b"] * 10
    assert _refused({"document": {"x": strings}}) == {"document.x[10]": [_message("an AWS access key id")]}


class _Clock:
    """A clock that moves 0.1 s at every reading: each pattern pass costs exactly that much."""

    def __init__(self) -> None:
        self.now = -0.1

    def monotonic(self) -> float:
        self.now += 0.1
        return self.now


def test_one_budget_covers_the_whole_call_even_the_last_check(monkeypatch: pytest.MonkeyPatch) -> None:
    import app.reports.secrets_scanner as scanner

    # the nine patterns over the joined strings fit in 0.95 s; judging the string found needs two more passes (the
    # AWS pattern is the second), which 1.15 s allows and 0.95 s does not
    monkeypatch.setattr(scanner, "time", _Clock())
    assert _refused({"notes": f"x {AWS}"}, budget=0.95) == {
        "notes": ["could not be checked for secrets in time; send a smaller report"]
    }
    monkeypatch.setattr(scanner, "time", _Clock())
    assert _refused({"notes": f"x {AWS}"}, budget=1.15) == {"notes": [_message("an AWS access key id")]}


class _StoppedClock:
    """A clock that never moves: only the regex engine's own timeout can end a search."""

    def monotonic(self) -> float:
        return 0.0


def test_each_search_is_bounded_by_what_is_left_of_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    import app.reports.secrets_scanner as scanner

    monkeypatch.setattr(scanner, "time", _StoppedClock())
    # 1.4 MB of near-miss assignments: the credential pattern's pass takes far more than 1 ms (the engine checks
    # its timeout while it backtracks)
    large = ("api_key=" + " " * 15) * 60_000
    assert _refused({"notes": large}, budget=0.001) == {
        "notes": ["could not be checked for secrets in time; send a smaller report"]
    }
