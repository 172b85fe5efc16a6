"""The report API's bodies as typed structures (docs/domain.md §9): the answers `app.reports.serializers` builds,
and the submissions `app.reports.validation` reads (documented here, parsed there with its own messages)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from msgspec import Meta, Struct

from app.kernel.answers import UNSET, Answer, Sha, Timestamp, UnsetType, Uuid, enum
from app.reports.models import (
    CHECK_VERDICTS,
    CONFIRMATION_VERDICTS,
    EVIDENCE_STATES,
    PROVENANCES,
    REVIEW_KINDS,
    SEVERITIES,
)
from app.reports.validation import (
    DISCLOSURE_MAX_DAYS,
    DISCLOSURE_MIN_DAYS,
    MAX_DESCRIPTION,
    MAX_EVIDENCE,
    MAX_FINDINGS,
    MAX_LABEL,
    MAX_LINE,
    MAX_NOTES,
    MAX_RUN_ID,
    MAX_TITLE,
    MIN_CHECK_NOTES,
)

Severity = Annotated[str, enum(SEVERITIES)]
Provenance = Annotated[str, enum(PROVENANCES)]
CheckVerdict = Annotated[str, enum(CHECK_VERDICTS)]
ConfirmationVerdict = Annotated[str, enum(CONFIRMATION_VERDICTS)]

# -- answers --


class FindingEvidence(Answer):
    """The finding checked at its commit (docs/domain.md "Evidence at the commit")."""

    state: Annotated[str, enum(EVIDENCE_STATES)]
    commit: Sha
    anchor: Annotated[str | None, Meta(description="sha256: of the cited lines; null without lines")]


class FindingRepository(Answer):
    host: str
    owner: str
    name: str


class FindingDetail(Answer):
    """A finding occurrence in full: its twin's `finding`, and a maintainer's view of it under embargo."""

    public_id: Uuid
    title: str
    severity: Severity
    file_path: str
    line_start: int | None
    line_end: int | None
    description: str
    disposition: str
    status: str | None
    canonical_public_id: Uuid | None
    confirmations_count: int | None
    disputes_count: int | None
    pattern_key: str | None
    commit_sha: Sha
    reported_at: Timestamp | None
    repository: FindingRepository


class ReportFinding(Answer):
    public_id: Uuid
    canonical_public_id: Annotated[Uuid | None, Meta(description="null while its evidence is pending")]
    pattern_key: str | None
    title: str
    severity: Severity
    disposition: str
    url: str
    evidence: FindingEvidence
    held: Annotated[
        str | None,
        Meta(
            description="why it is not public yet: low_signal, held for review until a reviewer checks it (earned "
            "trust); embargo, under coordinated disclosure until its deadline (its maintainer told first)"
        ),
    ] = None


class SarifSkipped(Answer):
    suppressed: int
    absent: int
    not_a_problem: int
    no_location: int


class SarifTruncated(Answer):
    titles: int
    descriptions: int


class SarifSummary(Answer):
    results: int
    findings: int
    skipped: SarifSkipped
    truncated: SarifTruncated


class Report(Answer):
    id: int
    kind: Literal["report"]
    repository: Annotated[str, Meta(description="owner/name (the host is `host`)")]
    host: str
    commit_sha: Sha
    commit_committed_at: Annotated[str | None, Meta(description="ISO 8601 date-time")]
    model: str | None
    prompt_version: str | None
    run_id: str | None
    provenance: Provenance
    provenance_attestation: Literal["self_reported"]
    review_kind: Annotated[str, enum(REVIEW_KINDS)]
    findings_count: int
    verified: bool
    review_status: str
    visibility: str
    disclosed: Annotated[
        bool, Meta(description="public now: false while its evidence is pending or any finding is held or embargoed")
    ]
    record_url: str
    findings: list[ReportFinding]
    sarif: SarifSummary | UnsetType = UNSET  # the answer to a SARIF log only


class Check(Answer):
    id: int
    canonical_public_id: Uuid
    verdict: CheckVerdict
    commit_sha: Sha
    provenance: Provenance
    status: str
    confirmations_count: int
    disputes_count: int
    counted: Annotated[bool, Meta(description="whether this check counts toward the quorum now (docs/domain.md §1.5)")]
    reason: Annotated[str | None, Meta(description="why it does not count; null when it does")]


class Confirmation(Answer):
    id: int
    report_id: int
    verdict: ConfirmationVerdict
    provenance: Provenance
    commit_sha: Sha
    confirmations_count: int
    disputes_count: int
    verified: bool
    review_status: str
    checks_recorded: int


# -- submissions: open objects (unknown keys are ignored) --

EXAMPLE_COMMIT = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
EXAMPLE_NOTES = "Reproduced with the proof of concept in the description."
CommitSha = Annotated[str, Meta(pattern=r"^\s*[0-9a-fA-F]{40}\s*$", description="trimmed, lowercased")]
Notes = Annotated[str, Meta(min_length=MIN_CHECK_NOTES, max_length=MAX_NOTES)]
Evidence = Annotated[str, Meta(max_length=MAX_EVIDENCE)]
Line = Annotated[int, Meta(ge=1, le=MAX_LINE)]
FormatVersion = Annotated[int, Meta(extra_json_schema={"const": 1})]


class ScanFinding(Struct, kw_only=True):
    file: Annotated[str, Meta(description="a safe repository-relative path (docs/domain.md §2.3)")]
    severity: Severity
    title: Annotated[str, Meta(max_length=MAX_TITLE)]
    description: Annotated[str, Meta(max_length=MAX_DESCRIPTION)]
    disposition: Annotated[str, Meta(description="ignored: recomputed by the registry")] | UnsetType = UNSET
    existing_finding_id: (
        Annotated[str, Meta(description="a hint only", extra_json_schema={"format": "uuid"})] | UnsetType
    ) = UNSET
    line_start: Line | UnsetType = UNSET
    line_end: Annotated[int, Meta(ge=1, le=MAX_LINE, description="needs line_start, ≥ it")] | UnsetType = UNSET


class ScanDocument(Struct, kw_only=True):
    """Scan Format v1 (unknown keys ignored; ≤ 2,000,000 characters as stored). Older clients may send the version
    as `tarakan_review_format` instead: still read when `tarakan_scan_format` is absent, not part of this format."""

    tarakan_scan_format: FormatVersion
    findings: Annotated[list[ScanFinding], Meta(max_length=MAX_FINDINGS)]


class DisclosureRequest(Struct, kw_only=True):
    """The reporter's coordinated-disclosure request: the report's new findings stay off every public surface (a
    stub shows their severity, date and deadline) for the larger of these days and the repository's own window, at
    most 90, while the repository's verified maintainers are told first (docs/domain.md "Coordinated disclosure")."""

    days: Annotated[int, Meta(ge=DISCLOSURE_MIN_DAYS, le=DISCLOSURE_MAX_DAYS)]


class ReportSubmission(Struct, kw_only=True):
    EXAMPLES: ClassVar[list[dict[str, Any]]] = [
        {
            "commit_sha": EXAMPLE_COMMIT,
            "model": "gpt-5",
            "prompt_version": "review/v3",
            "run_id": "run-2026-11-30-1",
            "document": {
                "tarakan_scan_format": 1,
                "findings": [
                    {
                        "file": "lib/auth.py",
                        "line_start": 42,
                        "severity": "high",
                        "title": "SQL injection in login",
                        "description": "The user name is concatenated into the SQL string.",
                    }
                ],
            },
        }
    ]

    commit_sha: CommitSha
    provenance: Provenance = "agent"
    review_kind: Annotated[str, enum(REVIEW_KINDS)] = "code_review"
    model: Annotated[str, Meta(max_length=MAX_LABEL, description="required unless provenance is human")] | UnsetType = (
        UNSET
    )
    prompt_version: Annotated[str, Meta(max_length=MAX_LABEL, description="as model")] | UnsetType = UNSET
    run_id: Annotated[str, Meta(max_length=MAX_RUN_ID, description="one report per run and account")] | UnsetType = (
        UNSET
    )
    notes: Annotated[str, Meta(max_length=MAX_NOTES)] | UnsetType = UNSET
    disclosure: (
        Annotated[
            DisclosureRequest,
            Meta(description="an embargo: 7 to 90 days (a SARIF log asks with ?disclosure_days=N); absent: none"),
        ]
        | UnsetType
    ) = UNSET
    document: ScanDocument


class CheckSubmission(Struct, kw_only=True):
    EXAMPLES: ClassVar[list[dict[str, Any]]] = [
        {"commit_sha": EXAMPLE_COMMIT, "verdict": "confirmed", "provenance": "human", "notes": EXAMPLE_NOTES}
    ]

    commit_sha: CommitSha
    verdict: CheckVerdict
    provenance: Provenance = "agent"
    notes: Notes
    evidence: Evidence | UnsetType = UNSET


class ConfirmationSubmission(Struct, kw_only=True):
    EXAMPLES: ClassVar[list[dict[str, Any]]] = [{"verdict": "confirmed", "provenance": "human", "notes": EXAMPLE_NOTES}]

    verdict: ConfirmationVerdict
    provenance: Provenance = "agent"
    notes: Notes
    evidence: Evidence | UnsetType = UNSET


class SarifLog(Struct, kw_only=True):
    """A SARIF 2.1.0 log (Content-Type application/sarif+json): one report, mapped as docs/sarif.md says; errors
    name the JSON path in the log (`runs[0].results[12].locations[0]`)"""

    version: Annotated[str, Meta(extra_json_schema={"const": "2.1.0"})]
    runs: Annotated[list[dict[str, Any]], Meta(min_length=1)]


# -- bulk submission (POST /api/v1/reports/batch, application/x-ndjson; docs/domain.md §9 "Batches") --


class BatchReport(ReportSubmission, kw_only=True):
    """One line of a batch: a report body (Scan Format v1 envelope) and the repository it is about."""

    EXAMPLES: ClassVar[list[dict[str, Any]]] = [
        {"repository": "github.com/acme/widget", **ReportSubmission.EXAMPLES[0]},
    ]

    repository: Annotated[str, Meta(description="HOST/OWNER/NAME of a registered repository")]


class BatchLine(Answer):
    """One line of a batch's answer, in the order of the request's lines: `report` when the line was stored (201)
    or was a retry of a run already stored (200), else `errors` naming the field and the rule; a 429 line was not
    tried (a limit of the request or the account) and may be sent again after `retry_after` seconds."""

    line: Annotated[int, Meta(ge=1, description="the request's line, counted from 1")]
    status: Annotated[int, Meta(description="what the single-report route would have answered for this line")]
    report: Report | UnsetType = UNSET
    errors: dict[str, list[str]] | UnsetType = UNSET
    retry_after: Annotated[int, Meta(ge=1)] | UnsetType = UNSET
