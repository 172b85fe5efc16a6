"""The report path's parse, in one place: a body becomes a `ReportInput` (a Scan Format v1 body, or a SARIF 2.1.0 log
mapped onto one) or a `VerdictInput`, validated and scanned for secrets. CPU work only, run on an intake thread
under the request's budget before any transaction (`app.kernel.intake`; docs/security.md "Body budget"); the
service then only locks and writes (docs/architecture.md "reports")."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from app.kernel.errors import ValidationError
from app.kernel.intake import Body, Budget, json_object
from app.reports import sarif
from app.reports.secrets_scanner import SCAN_BUDGET_SECONDS, scan_fields
from app.reports.validation import (
    DISCLOSURE_DAYS_RULE,
    ReportInput,
    VerdictInput,
    disclosure_days_ok,
    validate_check,
    validate_confirmation,
    validate_report,
)


def sarif_as_json(media_type: str) -> str:
    return (
        f"this body is a SARIF 2.1.0 log sent as {media_type or 'no content type'}: send it with "
        f"Content-Type: {sarif.SARIF_MEDIA_TYPE} (add ?commit_sha= when the log names no revision; docs/sarif.md)"
    )


def parse_report(body: Body, budget: Budget) -> tuple[ReportInput, sarif.SarifReport | None]:
    """A Scan Format v1 body, or a SARIF 2.1.0 log mapped onto one (docs/sarif.md; the commit and the checkout
    root may come as parameters), validated and scanned for secrets."""
    document = json_object(body, budget)
    if body.media_type != sarif.SARIF_MEDIA_TYPE:
        if sarif.is_sarif(document):
            # otherwise the envelope's rules answer (commit_sha, model, document "is required"), naming no cause
            raise ValidationError({"content_type": [sarif_as_json(body.media_type)]})
        return prepare_report(document, budget), None
    days = sarif_disclosure_days(body.query.get("disclosure_days"))
    mapped = sarif.sarif_to_report(
        document,
        commit_sha=body.query.get("commit_sha"),
        source_root=body.query.get("source_root"),
        budget=budget,
    )
    assert mapped.report is not None
    if days is not None:
        mapped.report = replace(mapped.report, disclosure_days=days)
    scan_report(mapped.report, budget)
    return mapped.report, mapped


def sarif_disclosure_days(raw: str | None) -> int | None:
    """A SARIF log's embargo request, the query parameter `?disclosure_days=N` (a log has no envelope of ours):
    the same rule as the envelope's `disclosure.days`."""
    if raw is None:
        return None
    days = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 3 else None
    if not disclosure_days_ok(days):
        raise ValidationError({"disclosure_days": [DISCLOSURE_DAYS_RULE]})
    return days


def prepare_report(document: dict[str, Any], budget: Budget) -> ReportInput:
    """A report body validated and scanned for secrets."""
    report = validate_report(document)
    budget.check()
    scan_report(report, budget)
    return report


def scan_report(report: ReportInput, budget: Budget) -> None:
    """422 when the report carries a secret (docs/domain.md §9)."""
    fields = {
        "model": report.model,
        "prompt_version": report.prompt_version,
        "run_id": report.run_id,
        "notes": report.notes,
        "document": report.document,
    }
    scan_fields(fields, budget=min(SCAN_BUDGET_SECONDS, budget.remaining()))


def parse_check(body: Body, budget: Budget) -> VerdictInput:
    return prepare_verdict(json_object(body, budget), budget, check=True)


def parse_confirmation(body: Body, budget: Budget) -> VerdictInput:
    return prepare_verdict(json_object(body, budget), budget, check=False)


def prepare_verdict(document: dict[str, Any], budget: Budget, *, check: bool) -> VerdictInput:
    """A check (`check=True`) or report-level verdict body, validated and scanned for secrets."""
    verdict = validate_check(document) if check else validate_confirmation(document)
    budget.check()
    scan_fields(
        {"notes": verdict.notes, "evidence": verdict.evidence}, budget=min(SCAN_BUDGET_SECONDS, budget.remaining())
    )
    return verdict
