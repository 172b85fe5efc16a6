"""Scan Format v1 validation (docs/domain.md §9) and the secrets scanner: every rule with its error, and nothing written
when a report is refused."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.kernel.errors import ValidationError
from app.reports.secrets_scanner import find_secret
from app.reports.service import submit_report
from app.reports.validation import canonical_path, validate_check, validate_report
from tests import factories
from tests.reports.support import COMMIT, DROP, finding, report_body, row_counts


def errors_of(body: dict[str, Any]) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as info:
        validate_report(body)
    return info.value.errors


# --- envelope ------------------------------------------------------------------------------------------------

ENVELOPE_CASES: list[tuple[str, dict[str, Any], str, str]] = [
    ("commit missing", {"commit_sha": DROP}, "commit_sha", "is required"),
    ("commit blank", {"commit_sha": "  "}, "commit_sha", "can't be blank"),
    ("commit short", {"commit_sha": "abc123"}, "commit_sha", "must be 40 hexadecimal characters"),
    ("commit not hex", {"commit_sha": "g" * 40}, "commit_sha", "must be 40 hexadecimal characters"),
    ("commit number", {"commit_sha": 12345}, "commit_sha", "must be a string"),
    ("provenance", {"provenance": "robot"}, "provenance", "must be one of agent, human, hybrid"),
    ("review_kind", {"review_kind": "audit"}, "review_kind", "must be one of code_review, threat_model"),
    ("model missing", {"model": DROP}, "model", "is required unless provenance is human"),
    ("model blank", {"model": "   "}, "model", "can't be blank unless provenance is human"),
    ("prompt missing", {"prompt_version": DROP}, "prompt_version", "is required unless provenance is human"),
    ("model long", {"model": "m" * 101}, "model", "must be at most 100 characters"),
    ("prompt long", {"prompt_version": "p" * 101}, "prompt_version", "must be at most 100 characters"),
    ("run_id long", {"run_id": "r" * 201}, "run_id", "must be at most 200 characters"),
    ("run_id type", {"run_id": 7}, "run_id", "must be a string"),
    ("notes long", {"notes": "n" * 2001}, "notes", "must be at most 2000 characters"),
    ("document missing", {"document": DROP}, "document", "is required"),
    ("document list", {"document": []}, "document", "must be a JSON object"),
    ("document string", {"document": "{}"}, "document", "must be a JSON object"),
    (
        "format missing",
        {"document": {"findings": []}},
        "document.tarakan_scan_format",
        "is required",
    ),
    (
        "format 2",
        {"document": {"tarakan_scan_format": 2, "findings": []}},
        "document.tarakan_scan_format",
        "tarakan_scan_format must be 1",
    ),
    (
        "format true",
        {"document": {"tarakan_scan_format": True, "findings": []}},
        "document.tarakan_scan_format",
        "tarakan_scan_format must be 1",
    ),
    ("findings missing", {"document": {"tarakan_scan_format": 1}}, "document.findings", "is required"),
    (
        "findings object",
        {"document": {"tarakan_scan_format": 1, "findings": {}}},
        "document.findings",
        "must be a list",
    ),
    (
        "201 findings",
        {"document": {"tarakan_scan_format": 1, "findings": [finding()] * 201}},
        "document.findings",
        "must have at most 200 findings",
    ),
]


@pytest.mark.parametrize(
    ("overrides", "field", "message"), [c[1:] for c in ENVELOPE_CASES], ids=[c[0] for c in ENVELOPE_CASES]
)
def test_envelope_rules(overrides: dict[str, Any], field: str, message: str) -> None:
    errors = errors_of(report_body(**overrides))
    assert field in errors, errors
    assert message in errors[field][0]


def test_envelope_errors_are_collected_together() -> None:
    errors = errors_of(report_body(commit_sha="nope", provenance="robot", notes="n" * 2001, run_id="r" * 201))
    assert {"commit_sha", "provenance", "notes", "run_id"} <= set(errors)


def test_defaults_normalization_and_alias() -> None:
    report = validate_report(
        report_body(
            commit_sha=f"  {'ABCDEF0123' * 4}  ",
            model="  gpt  ",
            document={"tarakan_review_format": 1, "findings": [finding(line_end=DROP)], "extra": {"ignored": 1}},
        )
    )
    assert report.commit_sha == "abcdef0123" * 4
    assert (report.provenance, report.review_kind, report.model) == ("agent", "code_review", "gpt")
    finding_ = report.findings[0]
    assert (finding_.line_start, finding_.line_end, finding_.disposition) == (10, 10, "new")


def test_human_reports_need_no_model() -> None:
    report = validate_report(report_body(provenance="human", model=DROP, prompt_version=DROP))
    assert report.model is None and report.prompt_version is None


def test_empty_findings_list_is_a_report_without_findings() -> None:
    assert validate_report(report_body(findings=[])).findings == []


def test_raw_document_limit() -> None:
    big = finding(description="d" * 9000)
    # 200 findings of ~9,100 characters plus padding: over 2,000,000 characters of document
    document = {"tarakan_scan_format": 1, "findings": [big] * 200, "padding": "x" * 300_000}
    errors = errors_of(report_body(document=document))
    assert errors == {"document": ["must be at most 2000000 characters"]}


# --- findings ------------------------------------------------------------------------------------------------

FINDING_CASES: list[tuple[str, dict[str, Any], str, str]] = [
    ("file missing", {"file": DROP}, "file", "is required"),
    ("file blank", {"file": "   "}, "file", "must not be blank"),
    ("file dots only", {"file": "./."}, "file", "must not be blank"),
    ("file number", {"file": 5}, "file", "must be a string"),
    ("file absolute", {"file": "/etc/passwd"}, "file", "must be a relative path"),
    ("file absolute after trim", {"file": "  /etc/passwd"}, "file", "must be a relative path"),
    ("file traversal", {"file": "lib/../../etc/passwd"}, "file", "must not contain .. segments"),
    ("file backslash traversal", {"file": "lib\\..\\secret"}, "file", "must not contain .. segments"),
    ("file too long", {"file": "a/" * 200 + "b" * 200}, "file", "must be at most 500 bytes"),
    ("file multibyte too long", {"file": "é" * 251}, "file", "must be at most 500 bytes"),
    ("file segments", {"file": "/".join(["a"] * 65)}, "file", "must have at most 64 segments"),
    ("file control", {"file": "lib/a\x07b.ex"}, "file", "must not contain control characters"),
    ("file del", {"file": "lib/a\x7fb.ex"}, "file", "must not contain control characters"),
    ("file segment", {"file": "lib/" + "s" * 256}, "file", "must not have a segment longer than 255 bytes"),
    ("file surrogate", {"file": "lib/\ud800.ex"}, "file", "must be valid UTF-8"),
    ("severity missing", {"severity": DROP}, "severity", "is required"),
    ("severity bad", {"severity": "urgent"}, "severity", "must be one of critical, high, medium, low, info"),
    ("severity case", {"severity": "HIGH"}, "severity", "must be one of"),
    ("title missing", {"title": DROP}, "title", "is required"),
    ("title blank", {"title": " \t "}, "title", "must not be blank"),
    ("title type", {"title": ["x"]}, "title", "must be a string"),
    ("title long", {"title": "t" * 201}, "title", "must be at most 200 characters"),
    ("description missing", {"description": DROP}, "description", "is required"),
    ("description blank", {"description": ""}, "description", "must not be blank"),
    ("description long", {"description": "d" * 10_001}, "description", "must be at most 10000 characters"),
    ("disposition bad", {"disposition": "duplicate"}, "disposition", "must be one of new, matches_existing"),
    ("existing id bad", {"existing_finding_id": "not-a-uuid"}, "existing_finding_id", "must be a UUID string"),
    ("existing id number", {"existing_finding_id": 12}, "existing_finding_id", "must be a UUID string"),
    ("line_start float", {"line_start": 10.0}, "line_start", "must be an integer"),
    ("line_start string", {"line_start": "10"}, "line_start", "must be an integer"),
    ("line_start bool", {"line_start": True}, "line_start", "must be an integer"),
    ("line_start zero", {"line_start": 0}, "line_start", "must be between 1 and 1000000"),
    ("line_start huge", {"line_start": 1_000_001, "line_end": DROP}, "line_start", "must be between 1 and 1000000"),
    ("line_end huge", {"line_end": 1_000_001}, "line_end", "must be between 1 and 1000000"),
    ("line_end bool", {"line_end": False}, "line_end", "must be an integer"),
    ("line_end alone", {"line_start": DROP, "line_end": 5}, "line_end", "requires line_start"),
    ("line_end before start", {"line_start": 10, "line_end": 9}, "line_end", "must be greater than or equal"),
]


@pytest.mark.parametrize(
    ("overrides", "key", "message"), [c[1:] for c in FINDING_CASES], ids=[c[0] for c in FINDING_CASES]
)
def test_finding_rules(overrides: dict[str, Any], key: str, message: str) -> None:
    errors = errors_of(report_body(findings=[finding(), finding(**overrides)]))
    assert list(errors) == [f"findings[1].{key}"], errors
    assert message in errors[f"findings[1].{key}"][0]


def test_finding_must_be_an_object() -> None:
    not_objects: list[Any] = ["lib/a.ex"]
    assert errors_of(report_body(findings=not_objects)) == {"findings[0]": ["must be an object"]}


def test_only_the_first_bad_finding_is_reported() -> None:
    errors = errors_of(report_body(findings=[finding(), finding(severity="x"), finding(title="")]))
    assert list(errors) == ["findings[1].severity"]


def test_accepted_finding_values() -> None:
    report = validate_report(
        report_body(
            findings=[
                finding(
                    file=" .\\lib\\\\Auth.ex ",
                    line_start=1,
                    line_end=1_000_000,
                    disposition="regression",
                    existing_finding_id="5e0f3a52-4b53-4f1b-9d3c-1f0e1b9c2a11",
                    title="t" * 200,
                    description="d" * 10_000,
                ),
                finding(line_start=None, line_end=None),
            ]
        )
    )
    first, second = report.findings
    assert first.file_path == "lib/Auth.ex"  # canonicalized, case kept
    assert (first.line_start, first.line_end, first.disposition) == (1, 1_000_000, "regression")
    assert str(first.claimed_canonical_public_id) == "5e0f3a52-4b53-4f1b-9d3c-1f0e1b9c2a11"
    assert (second.line_start, second.line_end) == (None, None)


@pytest.mark.parametrize(
    ("raw", "stored"),
    [
        ("lib/auth.ex", "lib/auth.ex"),
        ("./lib/auth.ex", "lib/auth.ex"),
        ("lib//auth.ex", "lib/auth.ex"),
        ("Lib/Auth.ex", "Lib/Auth.ex"),
        ("lib\\auth.ex", "lib/auth.ex"),
        ("  lib/./auth.ex/ ", "lib/auth.ex"),
    ],
)
def test_canonical_path_storage_form(raw: str, stored: str) -> None:
    assert canonical_path(raw) == stored


# --- secrets -------------------------------------------------------------------------------------------------

SECRETS = [
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEow",
    "-----BEGIN OPENSSH PRIVATE KEY-----",
    "key AKIAIOSFODNN7EXAMPLE here",
    "ASIAY34FZKBOKMUTVV7A",
    "ghp_" + "a1B2" * 9,
    "gho_" + "Z" * 36,
    "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    "xoxb-123456789012-abcdefABCDEF",
    "AIza" + "SyA-1234567890abcdefghijklmnopqrstu",
    "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "api_key = 'abcdefghijklmnopqrstuvwxyz0123'",
    "SECRET_KEY=ABCDEFGHIJKLMNOPQRSTUVWX1234",
    'access_token: "0123456789abcdef0123456789abcdef"',
]


@pytest.mark.parametrize("secret", SECRETS)
def test_secrets_are_detected(secret: str) -> None:
    assert find_secret(f"prefix {secret} suffix") is not None


@pytest.mark.parametrize(
    "harmless",
    [
        "AKIA is the prefix of AWS keys",
        "api_key = short",
        "use a private_key loaded from the vault",
        "ghp_short",
        "a.b.c version 1.2.3",
    ],
)
def test_harmless_text_is_not_a_secret(harmless: str) -> None:
    assert find_secret(harmless) is None


# --- nothing written -----------------------------------------------------------------------------------------

BAD_BODIES: list[tuple[str, dict[str, Any], str]] = [
    ("bad commit", report_body(commit_sha="xyz"), "commit_sha"),
    ("bad format", report_body(document={"tarakan_scan_format": 3, "findings": []}), "document.tarakan_scan_format"),
    ("bad line", report_body(findings=[finding(line_start=2.5)]), "findings[0].line_start"),
    ("secret in notes", report_body(notes="creds: AKIAIOSFODNN7EXAMPLE"), "notes"),
    (
        "secret in description",
        report_body(findings=[finding(), finding(description="token ghp_" + "x" * 36)]),
        "findings[1].description",
    ),
    (
        "secret elsewhere",
        report_body(document={"tarakan_scan_format": 1, "findings": [], "meta": {"k": "sk_live_" + "a" * 20}}),
        "document.meta.k",
    ),
]


@pytest.mark.parametrize(("body", "field"), [c[1:] for c in BAD_BODIES], ids=[c[0] for c in BAD_BODIES])
async def test_refused_report_writes_nothing(body: dict[str, Any], field: str) -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    with pytest.raises(ValidationError) as info:
        await submit_report(account, repo.host, repo.owner, repo.name, copy.deepcopy(body))
    assert field in info.value.errors
    assert all(count == 0 for count in (await row_counts()).values())


async def test_secret_is_never_echoed() -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    secret = "AKIAIOSFODNN7EXAMPLE"
    with pytest.raises(ValidationError) as info:
        await submit_report(account, repo.host, repo.owner, repo.name, report_body(notes=f"found {secret}"))
    assert secret not in str(info.value.errors)
    assert "AWS access key" in info.value.errors["notes"][0]


async def test_one_bad_finding_among_200_stores_nothing() -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    findings = [finding(file=f"src/mod_{i}.py", title=f"Issue number {i}") for i in range(200)]
    findings[137] = finding(file="../outside.py")
    with pytest.raises(ValidationError) as info:
        await submit_report(account, repo.host, repo.owner, repo.name, report_body(findings=findings))
    assert info.value.errors == {"findings[137].file": ["must not contain .. segments"]}
    assert all(count == 0 for count in (await row_counts()).values())
    findings[137] = finding(file="src/fixed.py")
    result = await submit_report(account, repo.host, repo.owner, repo.name, report_body(findings=findings))
    assert result["findings_count"] == 200
    assert (await row_counts())["scan_findings"] == 200


def test_check_body_rules() -> None:
    with pytest.raises(ValidationError) as info:
        validate_check({"commit_sha": "x", "verdict": "maybe", "provenance": "cat", "notes": "too short"})
    assert info.value.errors == {
        "commit_sha": ["must be 40 hexadecimal characters"],
        "verdict": ["must be one of confirmed, disputed, fixed"],
        "provenance": ["must be one of agent, human, hybrid"],
        "notes": ["must be at least 20 characters"],
    }
    with pytest.raises(ValidationError) as info:
        validate_check({"commit_sha": COMMIT, "verdict": "fixed", "notes": "n" * 2001, "evidence": "e" * 10_001})
    assert info.value.errors == {
        "notes": ["must be at most 2000 characters"],
        "evidence": ["must be at most 10000 characters"],
    }
    with pytest.raises(ValidationError) as info:
        validate_check({"notes": "   "})
    assert info.value.errors == {
        "commit_sha": ["is required"],
        "verdict": ["is required"],
        "notes": ["can't be blank"],
    }
    with pytest.raises(ValidationError) as info:
        validate_check({"commit_sha": COMMIT, "verdict": "fixed"})
    assert info.value.errors == {"notes": ["is required"]}
    check = validate_check({"commit_sha": COMMIT.upper(), "verdict": "fixed", "notes": " reproduced at this commit "})
    assert (check.commit_sha, check.provenance, check.notes) == (COMMIT, "agent", "reproduced at this commit")
