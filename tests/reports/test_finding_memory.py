"""Finding memory keys: the worked examples of docs/domain.md §2.5 and property tests."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.reports.finding_memory import (
    EMPTY_PATTERN_KEY,
    fingerprint,
    legacy_normalize,
    normalize_title,
    pattern_key,
)

EXAMPLES = [
    ("SQL injection via string concatenation", "sql injection via string concatenation", None),
    ("  SQL   injection via string concat ", "sql injection via string concat", None),
    ("Verified: SQL injection via string concat", "sql injection via string concat", None),
    ("Verified: Likely: SQL Injection in `users.py`!", "sql injection in users.py", "likely sql injection in users.py"),
    ("CWE-79: Reflected XSS via 'q' param.", "reflected xss via q param", "cwe-79 reflected xss via q param."),
    ("HIGH: Hard-coded AWS key (AKIA...)", "hard-coded aws key akia", "high hard-coded aws key akia..."),
    (" Verified: X", "verified x", "verified x"),
    ("Error:Null deref", "null deref", "error null deref"),
    ("Low-severity: weak hash", "low-severity weak hash", None),
    ("Verified : Medium :: thing", "thing", "medium thing"),
    ("cwe 89 : SQLi in /api/v1/users?id=", "sqli in /api/v1/users id", "cwe 89 sqli in /api/v1/users id"),
    ("Path traversal in ../../etc/passwd handling", "path traversal in ../../etc/passwd handling", None),
    (
        "Use of MD5 (CWE-327) for password hashing...",
        "use of md5 cwe-327 for password hashing",
        "use of md5 cwe-327 for password hashing...",
    ),
    ("Info - something", "info - something", None),
    ("Hypothesis/low: Race in `cache.get()` ", "race in cache.get", None),
    ("JWT accepts alg=none", "jwt accepts alg none", None),
    ("SQL injection in login.", "sql injection in login", "sql injection in login."),
    ("foo .", "foo ", "foo ."),
]


@pytest.mark.parametrize(("title", "v2", "v1"), EXAMPLES)
def test_worked_examples(title: str, v2: str, v1: str | None) -> None:
    assert normalize_title(title) == v2
    assert legacy_normalize(title) == (v1 if v1 is not None else v2)


@pytest.mark.parametrize(
    ("title", "key"),
    [
        ("SQL injection via string concatenation", "57cb3fef33804e826f470caa1876ed7bcec82b9b904bcff74f8da2b45258cbbb"),
        (
            "Verified: Likely: SQL Injection in `users.py`!",
            "56a189ed7a7fb8780f25f74dbbac4488cd2bb503d2362256f8b5ae945166443a",
        ),
        ("CWE-79: Reflected XSS via 'q' param.", "864e0d0e40f7e2c59fa654fa383e06b1c677bcdf6b5522e1f25911843f672d9e"),
        ("JWT accepts alg=none", "36184f3124ea5c06ecd9fcdda378ad576337904c37704389d6929c9cb563ed46"),
        (
            "Missing authorization on admin API route",
            "e1a34b9d0048a17f8393a823bb8b9f083fe4ec65b4148457a5fb61d3b4d98adf",
        ),
    ],
)
def test_pattern_keys(title: str, key: str) -> None:
    assert pattern_key(title) == key


def test_non_string_title_is_empty_key() -> None:
    assert pattern_key(None) == EMPTY_PATTERN_KEY == pattern_key(42)
    assert EMPTY_PATTERN_KEY == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def test_shared_and_distinct_keys() -> None:
    variants = [
        "SQL injection via string concat",
        "  SQL   injection via string concat ",
        "Verified: SQL injection via string concat",
    ]
    assert len({pattern_key(v) for v in variants}) == 1
    assert pattern_key("XSS in template") != pattern_key(variants[0])


def test_fingerprint_vectors() -> None:
    expected = "5036fede82241715ce70d02173518f30f76c07cbe8ee44f2511cc29415f8614d"
    assert fingerprint("./lib/Auth.ex", 10, "Verified: SQL injection in login.") == expected
    assert fingerprint("lib/auth.ex", 10, "SQL injection in login") == expected
    assert fingerprint("src/App.ts", None, "Open redirect after login") == (
        "0bfb407bf1738d7879bf45dec07624311493f4476162db9d5563e14af79b7cc2"
    )


def test_fingerprint_variants() -> None:
    base = fingerprint("lib/auth.ex", 10, "SQL injection in login")
    for path in ("lib/auth.ex", "./lib/auth.ex", "lib//auth.ex", "Lib/Auth.ex", "lib\\auth.ex"):
        assert fingerprint(path, 10, "Verified: Likely: SQL injection in login.") == base
    assert fingerprint("lib/auth.ex", 11, "SQL injection in login") != base
    assert fingerprint("lib/auth.ex", 10, "XSS in login") != base


_titles = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=80)
_prefixes = st.sampled_from(["Verified: ", "LIKELY:", "cwe-79 : ", "Hypothesis/low: ", "error:", "Info :  "])


@given(_titles)
def test_normalize_is_idempotent_modulo_trailing_space(title: str) -> None:
    once = normalize_title(title)
    # the final dot strip may expose one trailing space (docs/domain.md §2.1 step 7); normalizing again trims it
    assert normalize_title(normalize_title(once)) == normalize_title(once)
    assert once == once.lower() or once == "".join(c.lower() for c in once)


@given(st.lists(_prefixes, max_size=4), st.from_regex(r"[a-z][a-z ]{0,30}[a-z]", fullmatch=True))
def test_prefixes_are_stripped(prefixes: list[str], body: str) -> None:
    assert pattern_key("".join(prefixes) + body) == pattern_key(body)


@given(
    st.lists(st.from_regex(r"[A-Za-z0-9_]{1,8}", fullmatch=True), min_size=1, max_size=5),
    st.integers(min_value=1, max_value=1_000_000) | st.none(),
)
def test_path_variants_share_a_fingerprint(segments: list[str], line: int | None) -> None:
    plain = "/".join(segments)
    variants = ["./" + plain, plain.replace("/", "//"), plain.upper(), plain.replace("/", "\\"), f" {plain} "]
    expected = fingerprint(plain, line, "T")
    assert all(fingerprint(v, line, "T") == expected for v in variants)
