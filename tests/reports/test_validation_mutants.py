"""Scan Format v1 and check bodies as a submitter meets them (docs/domain.md §9, §1.5): the exact error of each
rule at its edge, named by its field, every envelope error at once, the first bad finding only, and what a valid
body becomes (bench/mutation.py holds app/reports/validation.py to these; tests/reports/test_report_validation.py
checks the same rules by a word of each message). No database: the validators are pure."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from app.kernel.errors import ValidationError
from app.kernel.text import UNCLEAN_MESSAGE
from app.reports.validation import (
    MAX_RAW_DOCUMENT,
    canonical_path,
    document_field,
    normalize_commit_sha,
    validate_check,
    validate_confirmation,
    validate_report,
)
from tests.reports.support import COMMIT, DROP, finding, report_body

NOT_AN_OBJECT: Any = None
FINGERPRINTS = "must be an object of at most 20 strings (names up to 100 characters, values up to 500)"


def errors_of(body: dict[str, Any]) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as info:
        validate_report(body)
    return info.value.errors


def finding_error(**overrides: Any) -> dict[str, list[str]]:
    """The errors of a report whose second finding has `overrides`."""
    return errors_of(report_body(findings=[finding(), finding(**overrides)]))


def check_errors(body: dict[str, Any], *, confirmation: bool = False) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as info:
        (validate_confirmation if confirmation else validate_check)(body)
    return info.value.errors


def test_a_valid_report_as_stored() -> None:
    document = {"tarakan_scan_format": 1, "findings": [finding(), finding(line_start=DROP, line_end=DROP)], "x": "é"}
    report = validate_report(
        report_body(
            document=document,
            provenance="hybrid",
            review_kind="threat_model",
            model=" gpt ",
            prompt_version=" v1 ",
            run_id=" run-1 ",
            notes="  kept as written\n",
        )
    )
    assert (report.commit_sha, report.provenance, report.review_kind) == (COMMIT, "hybrid", "threat_model")
    assert (report.model, report.prompt_version, report.run_id, report.notes) == (
        "gpt",
        "v1",
        "run-1",
        "  kept as written\n",
    )
    assert report.document is document and report.raw_document == json.dumps(document, ensure_ascii=False)
    first, second = report.findings
    assert (first.position, first.file_path, first.line_start, first.line_end, first.severity) == (
        0,
        "lib/auth.ex",
        10,
        12,
        "high",
    )
    assert (first.title, first.description) == (
        "SQL injection in login",
        "User input is concatenated into the SQL string.",
    )
    assert (first.disposition, first.claimed_canonical_public_id, first.partial_fingerprints) == ("new", None, None)
    assert (second.position, second.line_start, second.line_end) == (1, None, None)
    bare = validate_report(report_body(model=DROP, prompt_version=DROP, provenance="human", run_id="", notes=""))
    assert (bare.model, bare.prompt_version, bare.run_id, bare.notes) == (None, None, None, None)
    assert (bare.provenance, bare.review_kind) == ("human", "code_review")


def test_every_envelope_error_at_once_each_with_its_exact_message() -> None:
    errors = errors_of(
        {"commit_sha": "xyz", "provenance": "robot", "review_kind": 3, "model": 5, "prompt_version": " ", "notes": 7}
    )
    assert errors == {
        "commit_sha": ["must be 40 hexadecimal characters"],
        "provenance": ["must be one of agent, human, hybrid"],
        "review_kind": ["must be one of code_review, threat_model, privacy_review, business_logic"],
        "model": ["must be a string"],
        "prompt_version": ["can't be blank unless provenance is human"],
        "notes": ["must be a string"],
        "document": ["is required"],
    }
    assert errors_of({"provenance": "agent", "document": []}) == {
        "commit_sha": ["is required"],
        "model": ["is required unless provenance is human"],
        "prompt_version": ["is required unless provenance is human"],
        "document": ["must be a JSON object"],
    }
    # a provenance refused still asks for the model (it may not be human)
    assert errors_of(report_body(provenance="robot", model=DROP)) == {
        "provenance": ["must be one of agent, human, hybrid"],
        "model": ["is required unless provenance is human"],
    }
    assert errors_of(report_body(model="a\tb", prompt_version="v\n1", run_id="r\r1", notes="two\nlines")) == {
        "model": [UNCLEAN_MESSAGE + ", tabs or line breaks"],
        "prompt_version": [UNCLEAN_MESSAGE + ", tabs or line breaks"],
        "run_id": [UNCLEAN_MESSAGE + ", tabs or line breaks"],
    }  # one line each; the notes may hold several
    assert errors_of(report_body(model="m" * 101)) == {"model": ["must be at most 100 characters"]}
    assert validate_report(report_body(model="m" * 100, run_id="r" * 200, notes="n" * 2000)).model == "m" * 100
    assert errors_of(report_body(run_id="r" * 201)) == {"run_id": ["must be at most 200 characters"]}
    assert errors_of(report_body(notes="n" * 2001)) == {"notes": ["must be at most 2000 characters"]}
    for value in (None, DROP):
        assert validate_report(report_body(provenance=value, review_kind=value)).provenance == "agent"


def test_the_commit_sha() -> None:
    assert normalize_commit_sha(" " + COMMIT.upper() + "\n") == (COMMIT, None)
    assert normalize_commit_sha(None) == (None, "is required")
    assert normalize_commit_sha(" ") == (None, "can't be blank")
    assert normalize_commit_sha(40) == (None, "must be a string")
    for bad in ("a" * 39, "a" * 41, "g" * 40, "a" * 40 + "\nb", "b" + "a" * 40):
        assert normalize_commit_sha(bad) == (None, "must be 40 hexadecimal characters"), bad


def test_the_document_and_its_findings_list() -> None:
    def document_errors(document: Any) -> dict[str, list[str]]:
        return errors_of(report_body(document=document))

    assert document_errors({"findings": []}) == {"document.tarakan_scan_format": ["is required: the format version, 1"]}
    for version in (2, "1", True, 1.0):
        assert document_errors({"tarakan_scan_format": version, "findings": []}) == {
            "document.tarakan_scan_format": ["tarakan_scan_format must be 1"]
        }
    assert validate_report(report_body(document={"tarakan_review_format": 1, "findings": []})).findings == []
    both = {"tarakan_scan_format": 1, "tarakan_review_format": 2, "findings": []}  # the format's own name wins
    assert validate_report(report_body(document=both)).findings == []
    assert document_errors({"tarakan_scan_format": 1}) == {
        "document.findings": ["is required: a list of findings, empty when there are none"]
    }
    assert document_errors({"tarakan_scan_format": 1, "findings": {}}) == {"document.findings": ["must be a list"]}
    assert len(validate_report(report_body(findings=[finding()] * 200)).findings) == 200
    assert document_errors({"tarakan_scan_format": 1, "findings": [finding()] * 201}) == {
        "document.findings": ["must have at most 200 findings"]
    }
    assert document_errors("{}") == {"document": ["must be a JSON object"]}


def test_the_raw_document_at_its_limit() -> None:
    def padded(size: int) -> dict[str, Any]:
        document: dict[str, Any] = {"tarakan_scan_format": 1, "findings": [], "padding": ""}
        document["padding"] = "x" * (size - len(json.dumps(document, ensure_ascii=False)))
        return document

    at_limit = padded(MAX_RAW_DOCUMENT)
    assert len(validate_report(report_body(document=at_limit)).raw_document) == MAX_RAW_DOCUMENT
    assert errors_of(report_body(document=padded(MAX_RAW_DOCUMENT + 1))) == {
        "document": ["must be at most 2000000 characters"]
    }
    # counted in characters, not bytes: é is kept as itself
    wide = {"tarakan_scan_format": 1, "findings": [], "t": "é" * 10}
    assert validate_report(report_body(document=wide)).raw_document == json.dumps(wide, ensure_ascii=False)


def test_an_unclean_string_elsewhere_in_the_document_is_named_after_the_findings_rules() -> None:
    document = {"tarakan_scan_format": 1, "findings": [finding()], "meta": {"k": ["ok", "bad\x00"]}}
    assert errors_of(report_body(document=document)) == {"document.meta.k[1]": [UNCLEAN_MESSAGE]}
    # a finding's own rules name the problem first, and no second error is added
    document = {"tarakan_scan_format": 1, "findings": [finding(title="")], "meta": "bad\x00"}
    assert errors_of(report_body(document=document)) == {"findings[0].title": ["must not be blank"]}
    document = {"tarakan_scan_format": 2, "findings": [], "meta": "bad\x00"}
    assert list(errors_of(report_body(document=document))) == ["document.tarakan_scan_format"]
    # an envelope error does not hide it
    document = {"tarakan_scan_format": 1, "findings": [finding(extra="bad\x01")]}
    assert errors_of(report_body(document=document, commit_sha="x")) == {
        "commit_sha": ["must be 40 hexadecimal characters"],
        "findings[0].extra": [UNCLEAN_MESSAGE],
    }
    assert document_field("findings[2].title") == "findings[2].title"
    assert document_field("meta.k") == "document.meta.k"
    assert document_field("meta.X") == "document.meta.X"
    assert document_field("") == "document"


# one test, not parametrized: every test of the suite pays the per-test TRUNCATE of tests/conftest.py
FINDING_RULES: list[tuple[dict[str, Any], str, str]] = [
    ({"file": DROP}, "file", "is required"),
    ({"file": None}, "file", "is required"),
    ({"file": " "}, "file", "must not be blank"),
    ({"file": "./"}, "file", "must not be blank"),
    ({"file": 5}, "file", "must be a string"),
    ({"file": "/a.py"}, "file", "must be a relative path (no leading /)"),
    ({"file": "a/../b.py"}, "file", "must not contain .. segments"),
    ({"file": "a" * 255 + "/" + "b" * 245}, "file", "must be at most 500 bytes"),
    ({"file": "/".join("a" * 65)}, "file", "must have at most 64 segments"),
    ({"file": "a\x1fb"}, "file", "must not contain control characters"),
    ({"file": "s" * 256}, "file", "must not have a segment longer than 255 bytes"),
    ({"file": "é" * 128}, "file", "must not have a segment longer than 255 bytes"),
    ({"file": "a/\udc80"}, "file", "must be valid UTF-8"),
    ({"severity": DROP}, "severity", "is required"),
    ({"severity": "High"}, "severity", "must be one of critical, high, medium, low, info"),
    ({"severity": 1}, "severity", "must be one of critical, high, medium, low, info"),
    ({"title": DROP}, "title", "is required"),
    ({"title": 3}, "title", "must be a string"),
    ({"title": " \n"}, "title", "must not be blank"),
    ({"title": "t" * 201}, "title", "must be at most 200 characters"),
    ({"title": "a\x00b"}, "title", UNCLEAN_MESSAGE),
    ({"description": "d" * 10_001}, "description", "must be at most 10000 characters"),
    ({"description": "\x7f"}, "description", UNCLEAN_MESSAGE),
    ({"disposition": "dup"}, "disposition", "must be one of new, matches_existing, regression, not_reproduced"),
    ({"disposition": 1}, "disposition", "must be one of new, matches_existing, regression, not_reproduced"),
    ({"existing_finding_id": 12}, "existing_finding_id", "must be a UUID string"),
    ({"existing_finding_id": "nope"}, "existing_finding_id", "must be a UUID string"),
    ({"line_start": 1.0}, "line_start", "must be an integer"),
    ({"line_start": False}, "line_start", "must be an integer"),
    ({"line_start": 0, "line_end": DROP}, "line_start", "must be between 1 and 1000000"),
    ({"line_start": 1_000_001, "line_end": DROP}, "line_start", "must be between 1 and 1000000"),
    ({"line_end": 0}, "line_end", "must be between 1 and 1000000"),
    ({"line_end": "12"}, "line_end", "must be an integer"),
    ({"line_start": DROP, "line_end": 3}, "line_end", "requires line_start"),
    ({"line_start": 5, "line_end": 4}, "line_end", "must be greater than or equal to line_start"),
    ({"partial_fingerprints": []}, "partial_fingerprints", FINGERPRINTS),
    ({"partial_fingerprints": {"k": 1}}, "partial_fingerprints", FINGERPRINTS),
    ({"partial_fingerprints": {"": "v"}}, "partial_fingerprints", FINGERPRINTS),
    ({"partial_fingerprints": {"k" * 101: "v"}}, "partial_fingerprints", FINGERPRINTS),
    ({"partial_fingerprints": {"k": "v" * 501}}, "partial_fingerprints", FINGERPRINTS),
    ({"partial_fingerprints": {f"k{n}": "v" for n in range(21)}}, "partial_fingerprints", FINGERPRINTS),
]


def test_each_finding_rule_names_its_key_with_its_exact_message() -> None:
    for overrides, key, message in FINDING_RULES:
        assert finding_error(**overrides) == {f"findings[1].{key}": [message]}, overrides


def test_a_finding_that_is_not_an_object() -> None:
    assert errors_of(report_body(findings=[finding(), NOT_AN_OBJECT, finding(title="")])) == {
        "findings[1]": ["must be an object"]
    }


def test_accepted_findings_at_every_edge() -> None:
    claimed = uuid.uuid4()
    report = validate_report(
        report_body(
            findings=[
                finding(
                    file="a" * 255 + "/" + "b" * 243 + "c",
                    line_start=1_000_000,
                    line_end=1_000_000,
                    title="t" * 200,
                    description="d" * 10_000,
                    disposition="not_reproduced",
                    existing_finding_id=f" {claimed} ",
                    partial_fingerprints={"k" * 100: "v" * 500, "a": "v"} | {f"k{n}": "" for n in range(18)},
                ),
                finding(
                    file="/".join("a" * 64), line_start=1, line_end=DROP, disposition=None, partial_fingerprints={}
                ),
                finding(file="é" * 127, line_start=7, line_end=7, existing_finding_id=None),
            ]
        )
    )
    first, second, third = report.findings
    assert len(first.file_path.encode()) == 500 and (first.line_start, first.line_end) == (1_000_000, 1_000_000)
    assert (first.disposition, first.claimed_canonical_public_id) == ("not_reproduced", claimed)
    assert first.partial_fingerprints is not None and len(first.partial_fingerprints) == 20
    assert (second.line_start, second.line_end, second.disposition, second.partial_fingerprints) == (1, 1, "new", None)
    assert (third.file_path, third.line_start, third.line_end, third.claimed_canonical_public_id) == (
        "é" * 127,
        7,
        7,
        None,
    )


def test_canonical_paths() -> None:
    assert canonical_path(" ./a//b\\c/./d/ ") == "a/b/c/d"
    for raw, message in [
        (None, "must be a string"),
        (" /a", "must be a relative path (no leading /)"),
        ("a/..", "must not contain .. segments"),
        ("", "must not be blank"),
        (".", "must not be blank"),
        ("a\x00", "must not contain control characters"),
    ]:
        with pytest.raises(ValueError) as info:
            canonical_path(raw)
        assert str(info.value) == message


def test_check_and_confirmation_bodies() -> None:
    notes = "n" * 20
    check = validate_check(
        {
            "commit_sha": COMMIT.upper(),
            "verdict": "disputed",
            "provenance": "human",
            "notes": f" {notes} ",
            "evidence": " e\n",
        }
    )
    assert (check.commit_sha, check.verdict, check.provenance, check.notes, check.evidence) == (
        COMMIT,
        "disputed",
        "human",
        notes,
        " e\n",  # evidence kept as written
    )
    confirmation = validate_confirmation({"verdict": "confirmed", "notes": notes, "commit_sha": "ignored"})
    assert (confirmation.commit_sha, confirmation.verdict, confirmation.provenance, confirmation.evidence) == (
        None,
        "confirmed",
        "agent",
        None,
    )
    assert validate_check({"commit_sha": COMMIT, "verdict": "fixed", "notes": "n" * 2000}).notes == "n" * 2000
    assert check_errors({"verdict": "fixed", "notes": notes}, confirmation=True) == {
        "verdict": ["must be one of confirmed, disputed"]
    }
    assert check_errors({"verdict": 1, "notes": notes}, confirmation=True) == {
        "verdict": ["must be one of confirmed, disputed"]
    }
    assert check_errors({"verdict": "confirmed", "notes": 20 * [1]}, confirmation=True) == {
        "notes": ["must be a string"]
    }
    assert check_errors({"verdict": "confirmed", "notes": " " + "n" * 19 + " "}, confirmation=True) == {
        "notes": ["must be at least 20 characters"]
    }
    assert check_errors({"verdict": "confirmed", "notes": notes + "\x00"}, confirmation=True) == {
        "notes": [UNCLEAN_MESSAGE]
    }
    assert check_errors({"verdict": "confirmed", "notes": "n" * 2001}, confirmation=True) == {
        "notes": ["must be at most 2000 characters"]
    }
    assert check_errors({"verdict": "confirmed", "notes": notes, "evidence": "\x00"}, confirmation=True) == {
        "evidence": [UNCLEAN_MESSAGE]
    }
    assert check_errors({"verdict": "confirmed", "notes": notes, "provenance": "robot"}, confirmation=True) == {
        "provenance": ["must be one of agent, human, hybrid"]
    }
    assert check_errors({"verdict": "fixed", "notes": notes}) == {"commit_sha": ["is required"]}
    assert validate_check({"commit_sha": COMMIT, "verdict": "fixed", "notes": notes, "evidence": "e" * 10_000}).evidence
