"""Scan Format v1 and check bodies: pure validation named by the API's field paths (docs/domain.md §9, §1.5)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.kernel.errors import ValidationError
from app.kernel.text import UNCLEAN_MESSAGE, first_unclean, is_clean, optional_text
from app.reports.models import (
    CHECK_VERDICTS,
    CONFIRMATION_VERDICTS,
    DISPOSITIONS,
    PROVENANCES,
    REVIEW_KINDS,
    SEVERITIES,
)

MAX_FINDINGS = 200
MAX_TITLE = 200
MAX_DESCRIPTION = 10_000
MAX_LINE = 1_000_000
MAX_LABEL = 100  # model, prompt_version
MAX_RUN_ID = 200
MAX_NOTES = 2000
MAX_RAW_DOCUMENT = 2_000_000
MIN_CHECK_NOTES = 20
MAX_EVIDENCE = 10_000
MAX_PATH_BYTES = 500
MAX_PATH_SEGMENTS = 64
MAX_SEGMENT_BYTES = 255
MAX_FINGERPRINTS = 20  # partial_fingerprints: a SARIF result's, kept as written (docs/sarif.md)
MAX_FINGERPRINT_KEY = 100
MAX_FINGERPRINT_VALUE = 500
# a reporter's coordinated-disclosure request, `"disclosure": {"days": N}` (docs/domain.md "Coordinated disclosure")
DISCLOSURE_MIN_DAYS, DISCLOSURE_MAX_DAYS = 7, 90
DISCLOSURE_DAYS_RULE = f"must be an integer from {DISCLOSURE_MIN_DAYS} to {DISCLOSURE_MAX_DAYS}"

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class FindingInput:
    position: int
    file_path: str
    line_start: int | None
    line_end: int | None
    severity: str
    title: str
    description: str
    disposition: str
    claimed_canonical_public_id: uuid.UUID | None
    partial_fingerprints: dict[str, str] | None = None
    rule_id: str | None = None  # a SARIF result's ruleId
    # what the evidence check found (app.reports.evidence), set before the report is stored
    evidence_state: str = "unchecked"
    anchor: str | None = None


@dataclass(frozen=True)
class ReportInput:
    commit_sha: str
    provenance: str
    review_kind: str
    model: str | None
    prompt_version: str | None
    run_id: str | None
    notes: str | None
    document: dict[str, Any]
    raw_document: str
    findings: list[FindingInput]
    sarif_origins: tuple[str, ...] = ()  # a SARIF log's: each finding's result path (`runs[0].results[3]`)
    disclosure_days: int | None = None  # the reporter's embargo request (`disclosure.days`), None: none asked


@dataclass(frozen=True)
class VerdictInput:
    """A check (on a canonical finding) or a report-level confirmation."""

    commit_sha: str | None
    verdict: str
    provenance: str
    notes: str
    evidence: str | None


REQUIRED = "is required"  # the key is absent (or null); "can't be blank" is a key sent empty


def _one_of(values: tuple[str, ...]) -> str:
    return "must be one of " + ", ".join(values)


def canonical_path(raw: object) -> str:
    """Storage form of a repository path (docs/domain.md §2.3, case kept). Raises ValueError with the rule broken."""
    if not isinstance(raw, str):
        raise ValueError("must be a string")
    trimmed = raw.strip()
    if trimmed.startswith("/"):
        raise ValueError("must be a relative path (no leading /)")
    segments = [s for s in trimmed.replace("\\", "/").split("/") if s != ""]
    if ".." in segments:
        raise ValueError("must not contain .. segments")
    path = "/".join(s for s in segments if s != ".")
    if path == "":
        raise ValueError("must not be blank")
    try:
        encoded = path.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates survive json.loads
        raise ValueError("must be valid UTF-8") from None
    if len(encoded) > MAX_PATH_BYTES:
        raise ValueError(f"must be at most {MAX_PATH_BYTES} bytes")
    parts = path.split("/")
    if len(parts) > MAX_PATH_SEGMENTS:
        raise ValueError(f"must have at most {MAX_PATH_SEGMENTS} segments")
    if _CONTROL.search(path):
        raise ValueError("must not contain control characters")
    if any(len(p.encode("utf-8")) > MAX_SEGMENT_BYTES for p in parts):
        raise ValueError(f"must not have a segment longer than {MAX_SEGMENT_BYTES} bytes")
    return path


def _is_int(value: object) -> bool:
    # JSON integers only: bool is an int subclass in Python and 5.0 is a float
    return isinstance(value, int) and not isinstance(value, bool)


def normalize_commit_sha(value: object) -> tuple[str | None, str | None]:
    """(normalized sha, error message)."""
    if value is None:
        return None, REQUIRED
    if isinstance(value, str) and value.strip() == "":
        return None, "can't be blank"
    if not isinstance(value, str):
        return None, "must be a string"
    sha = value.strip().lower()
    if not _COMMIT.match(sha):
        return None, "must be 40 hexadecimal characters"
    return sha, None


def document_field(document_path: str) -> str:
    """The API's name of a path inside the document: findings as the validator names them (`findings[3].title`),
    the rest under `document.`."""
    return document_path if document_path.startswith("findings[") else f"document.{document_path}".rstrip(".")


def _enum(body: dict[str, Any], field: str, values: tuple[str, ...], default: str, errors: dict[str, list[str]]) -> str:
    value = body.get(field)
    if value is None:
        return default
    if not isinstance(value, str) or value not in values:
        errors[field] = [_one_of(values)]
        return default
    return value


def _required_text(raw: dict[str, Any], key: str, maximum: int, fail: Callable[[str, str], ValidationError]) -> str:
    value = raw.get(key)
    if not isinstance(value, str) and value is not None:
        raise fail(key, "must be a string")
    if value is None:
        raise fail(key, REQUIRED)
    if value.strip() == "":
        raise fail(key, "must not be blank")
    if len(value) > maximum:
        raise fail(key, f"must be at most {maximum} characters")
    if not is_clean(value):
        raise fail(key, UNCLEAN_MESSAGE)
    return value


def _finding(index: int, raw: object) -> FindingInput:
    """One finding; raises ValidationError naming `findings[i].<key>` at the first broken rule."""

    def fail(key: str | None, message: str) -> ValidationError:
        return ValidationError({f"findings[{index}]" + (f".{key}" if key else ""): [message]})

    if not isinstance(raw, dict):
        raise fail(None, "must be an object")
    file_raw = raw.get("file")
    if file_raw is None:
        raise fail("file", REQUIRED)
    if isinstance(file_raw, str) and file_raw.strip() == "":
        raise fail("file", "must not be blank")
    try:
        file_path = canonical_path(file_raw)
    except ValueError as exc:
        raise fail("file", str(exc)) from None
    severity = raw.get("severity")
    if severity is None:
        raise fail("severity", REQUIRED)
    if not isinstance(severity, str) or severity not in SEVERITIES:
        raise fail("severity", _one_of(SEVERITIES))
    title = _required_text(raw, "title", MAX_TITLE, fail)
    description = _required_text(raw, "description", MAX_DESCRIPTION, fail)
    disposition = raw.get("disposition")
    if disposition is None:
        disposition = "new"
    elif not isinstance(disposition, str) or disposition not in DISPOSITIONS:
        raise fail("disposition", _one_of(DISPOSITIONS))
    claimed: uuid.UUID | None = None
    existing = raw.get("existing_finding_id")
    if existing is not None:
        if not isinstance(existing, str):
            raise fail("existing_finding_id", "must be a UUID string")
        try:
            claimed = uuid.UUID(existing.strip())
        except ValueError:
            raise fail("existing_finding_id", "must be a UUID string") from None
    line_start = raw.get("line_start")
    line_end = raw.get("line_end")
    for key, value in (("line_start", line_start), ("line_end", line_end)):
        if value is not None and not _is_int(value):
            raise fail(key, "must be an integer")
        if value is not None and not 1 <= value <= MAX_LINE:
            raise fail(key, f"must be between 1 and {MAX_LINE}")
    if line_end is not None and line_start is None:
        raise fail("line_end", "requires line_start")
    if line_start is not None and line_end is not None and line_end < line_start:
        raise fail("line_end", "must be greater than or equal to line_start")
    if line_start is not None and line_end is None:
        line_end = line_start
    partial_fingerprints = raw.get("partial_fingerprints")
    if partial_fingerprints is not None and not _fingerprints_ok(partial_fingerprints):
        raise fail(
            "partial_fingerprints",
            f"must be an object of at most {MAX_FINGERPRINTS} strings (names up to {MAX_FINGERPRINT_KEY} "
            f"characters, values up to {MAX_FINGERPRINT_VALUE})",
        )
    return FindingInput(
        position=index,
        file_path=file_path,
        line_start=line_start,
        line_end=line_end,
        severity=severity,
        title=title,
        description=description,
        disposition=disposition,
        claimed_canonical_public_id=claimed,
        partial_fingerprints=partial_fingerprints or None,
    )


def _fingerprints_ok(value: object) -> bool:
    return (
        isinstance(value, dict)
        and len(value) <= MAX_FINGERPRINTS
        and all(
            isinstance(v, str) and 0 < len(k) <= MAX_FINGERPRINT_KEY and len(v) <= MAX_FINGERPRINT_VALUE
            for k, v in value.items()
        )
    )


def _document(document: dict[str, Any], errors: dict[str, list[str]]) -> list[FindingInput]:
    version = document.get("tarakan_scan_format", document.get("tarakan_review_format"))
    if version is None:
        errors["document.tarakan_scan_format"] = [REQUIRED + ": the format version, 1"]
    elif not _is_int(version) or version != 1:
        errors["document.tarakan_scan_format"] = ["tarakan_scan_format must be 1"]
    raw_findings = document.get("findings")
    if raw_findings is None:
        errors["document.findings"] = [REQUIRED + ": a list of findings, empty when there are none"]
        return []
    if not isinstance(raw_findings, list):
        errors["document.findings"] = ["must be a list"]
        return []
    if len(raw_findings) > MAX_FINDINGS:
        errors["document.findings"] = [f"must have at most {MAX_FINDINGS} findings"]
        return []
    findings: list[FindingInput] = []
    for index, raw in enumerate(raw_findings):
        try:
            findings.append(_finding(index, raw))
        except ValidationError as exc:
            errors.update(exc.errors)
            return []
    return findings


def disclosure_days_ok(value: object) -> bool:
    """A reporter's embargo window: a JSON integer from 7 to 90 (days)."""
    return (
        isinstance(value, int) and not isinstance(value, bool) and DISCLOSURE_MIN_DAYS <= value <= DISCLOSURE_MAX_DAYS
    )


def _disclosure(body: dict[str, Any], errors: dict[str, list[str]]) -> int | None:
    """`"disclosure": {"days": N}`; absent or null: no request (the repository's own window may still apply)."""
    value = body.get("disclosure")
    if value is None:
        return None
    if not isinstance(value, dict):
        errors["disclosure"] = ['must be an object: {"days": N}']
        return None
    days = value.get("days")
    if days is None:
        errors["disclosure.days"] = [f"{REQUIRED}: {DISCLOSURE_DAYS_RULE}"]
    elif not disclosure_days_ok(days):
        errors["disclosure.days"] = [DISCLOSURE_DAYS_RULE]
    else:
        return int(days)
    return None


def validate_report(body: dict[str, Any]) -> ReportInput:
    """The whole report request body (envelope + document). Raises ValidationError with every envelope error and
    the first bad finding."""
    errors: dict[str, list[str]] = {}
    commit_sha, commit_error = normalize_commit_sha(body.get("commit_sha"))
    if commit_error:
        errors["commit_sha"] = [commit_error]
    provenance = _enum(body, "provenance", PROVENANCES, "agent", errors)
    review_kind = _enum(body, "review_kind", REVIEW_KINDS, "code_review", errors)
    model = optional_text(body, "model", MAX_LABEL, errors, trim=True, single_line=True)
    prompt_version = optional_text(body, "prompt_version", MAX_LABEL, errors, trim=True, single_line=True)
    if provenance != "human" or "provenance" in errors:
        for field, value in (("model", model), ("prompt_version", prompt_version)):
            if value is None and field not in errors:
                missing = body.get(field) is None
                errors[field] = [(REQUIRED if missing else "can't be blank") + " unless provenance is human"]
    run_id = optional_text(body, "run_id", MAX_RUN_ID, errors, trim=True, single_line=True)
    notes = optional_text(body, "notes", MAX_NOTES, errors, trim=False)
    disclosure_days = _disclosure(body, errors)
    document = body.get("document")
    findings: list[FindingInput] = []
    raw_document = ""
    if not isinstance(document, dict):
        errors["document"] = ["must be a JSON object"] if document is not None else [REQUIRED]
    else:
        raw_document = json.dumps(document, ensure_ascii=False)
        if len(raw_document) > MAX_RAW_DOCUMENT:
            errors["document"] = [f"must be at most {MAX_RAW_DOCUMENT} characters"]
        else:
            findings = _document(document, errors)
            # the findings' own rules first (they name the rule); then any other string of the document
            unclean = None if any(k.startswith(("document", "findings")) for k in errors) else first_unclean(document)
            if unclean is not None:
                errors[document_field(unclean)] = [UNCLEAN_MESSAGE]
                findings = []
    if errors:
        raise ValidationError(errors)
    assert commit_sha is not None and isinstance(document, dict)
    return ReportInput(
        commit_sha=commit_sha,
        provenance=provenance,
        review_kind=review_kind,
        model=model,
        prompt_version=prompt_version,
        run_id=run_id,
        notes=notes,
        document=document,
        raw_document=raw_document,
        findings=findings,
        disclosure_days=disclosure_days,
    )


def _verdict_body(body: dict[str, Any], verdicts: tuple[str, ...], *, commit_required: bool) -> VerdictInput:
    errors: dict[str, list[str]] = {}
    commit_sha: str | None = None
    if commit_required:
        commit_sha, commit_error = normalize_commit_sha(body.get("commit_sha"))
        if commit_error:
            errors["commit_sha"] = [commit_error]
    verdict = body.get("verdict")
    if verdict is None:
        errors["verdict"] = [REQUIRED]
    elif not isinstance(verdict, str) or verdict not in verdicts:
        errors["verdict"] = [_one_of(verdicts)]
    # the API default is agent (agent checks never count toward quorum)
    provenance = _enum(body, "provenance", PROVENANCES, "agent", errors)
    notes = body.get("notes")
    if notes is None:
        errors["notes"] = [REQUIRED]
    elif isinstance(notes, str) and notes.strip() == "":
        errors["notes"] = ["can't be blank"]
    elif not isinstance(notes, str):
        errors["notes"] = ["must be a string"]
    elif len(notes.strip()) < MIN_CHECK_NOTES:
        errors["notes"] = [f"must be at least {MIN_CHECK_NOTES} characters"]
    elif len(notes) > MAX_NOTES:
        errors["notes"] = [f"must be at most {MAX_NOTES} characters"]
    elif not is_clean(notes):
        errors["notes"] = [UNCLEAN_MESSAGE]
    evidence = optional_text(body, "evidence", MAX_EVIDENCE, errors, trim=False)
    if errors:
        raise ValidationError(errors)
    assert isinstance(verdict, str) and isinstance(notes, str)
    return VerdictInput(
        commit_sha=commit_sha, verdict=verdict, provenance=provenance, notes=notes.strip(), evidence=evidence
    )


def validate_check(body: dict[str, Any]) -> VerdictInput:
    """`{commit_sha, verdict, provenance (default agent), notes 20..2000, evidence ≤10,000}`."""
    return _verdict_body(body, CHECK_VERDICTS, commit_required=True)


def validate_confirmation(body: dict[str, Any]) -> VerdictInput:
    """Report-level verdict: the commit is the report's own."""
    return _verdict_body(body, CONFIRMATION_VERDICTS, commit_required=False)
