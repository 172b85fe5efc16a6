"""The exact bytes behind each finding-memory key (docs/domain.md §2.1-2.3), written out by hand: a v1 canonical
stored by the original system is found again only if the legacy fingerprint is byte for byte the same, and a v2 key
changes every atlas row it names. bench/mutation.py holds app/reports/finding_memory.py to these."""

from __future__ import annotations

import hashlib

from app.reports.finding_memory import (
    EMPTY_PATTERN_KEY,
    fingerprint,
    fingerprint_path,
    legacy_fingerprint,
    legacy_normalize,
    normalize_title,
    pattern_key,
)


def sha(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def test_the_v2_fingerprint_is_path_line_and_title_joined_by_unit_separators() -> None:
    assert fingerprint("src/app.py", 10, "SQL injection") == sha("src/app.py\x1f10\x1fsql injection")
    assert fingerprint("./Src//App.py", 10, "High: SQL injection.") == sha("src/app.py\x1f10\x1fsql injection")
    assert fingerprint("src/app.py", None, "SQL injection") == sha("src/app.py\x1f\x1fsql injection")
    assert fingerprint(None, 0, None) == sha("\x1f0\x1f")


def test_the_legacy_fingerprint_keeps_line_end_and_the_v1_title() -> None:
    assert legacy_fingerprint("src/app.py", 10, 12, "Verified: SQL injection.") == sha(
        "src/app.py\x1f10\x1f12\x1fsql injection."
    )
    assert legacy_fingerprint("SRC/App.py", None, None, "x") == sha("src/app.py\x1f\x1f\x1fx")
    assert legacy_fingerprint(None, 3, None, 5) == sha("\x1f3\x1f\x1f")
    assert legacy_normalize("Likely:  Foo!  ") == "foo"
    assert legacy_normalize("Likely: Verified: Foo") == "verified foo"  # one prefix only, unlike v2
    assert (legacy_normalize(None), legacy_normalize(7)) == ("", "")


def test_fingerprint_paths_are_canonical_and_refuse_parent_segments() -> None:
    cases = {
        "./Src//App.PY": "src/app.py",
        "a\\b\\c": "a/b/c",
        " /a/./b/ ": "a/b",
        "a/../b": "",
        "..": "",
        "": "",
        "ΣΑΣ/ΌΣ": "σασ/όσ",  # no final sigma: character by character, as the original
    }
    assert {path: fingerprint_path(path) for path in cases} == cases
    assert fingerprint_path(None) == "" and fingerprint_path(3) == ""


def test_titles_that_are_not_strings() -> None:
    assert (normalize_title(None), normalize_title(5)) == ("", "5")
    assert normalize_title("ΌΣΟΣ.") == "όσοσ"
    assert pattern_key(5) == pattern_key(None) == pattern_key("") == EMPTY_PATTERN_KEY == sha("")
    assert pattern_key("Verified: Likely: X") == sha("x")
