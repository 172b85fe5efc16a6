"""The evidence gate at submission (docs/domain.md "Evidence at the commit"): a report's commit and findings checked
at the forge (`app.reports.evidence`) before its transaction, outside it and outside the account's writer lock. A
refusal is a 422 naming the field (as validation names it; a SARIF log's location for a SARIF log) and stores one
`report_refusals` row; an undecided check stores the report pending (`app.reports.service`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from datetime import datetime

from sqlalchemy import text

from app.forge.api import evidence_enabled
from app.kernel import db
from app.kernel.config import forge_budget_seconds
from app.kernel.errors import ValidationError
from app.kernel.refs import normalize_ref
from app.reports.evidence import EvidenceResult, FindingRef, check_listed
from app.reports.sarif import sarif_errors
from app.reports.validation import ReportInput

# the repository as it is now: deleted since its row was read (a moderator's), the refusal is kept without it
_REFUSED = text(
    "INSERT INTO report_refusals (account_id, repository_id, reason)"
    " SELECT :aid, (SELECT id FROM repositories WHERE id = :rid), :reason"
)


@dataclass(frozen=True)
class Gate:
    """A checked report: its findings carry their evidence state and anchor; `pending` when any is undecided."""

    report: ReportInput
    pending: bool
    committed_at: datetime | None
    repository_id: int  # the repository checked: the report's transaction stores it pending when its own differs

    def undecided(self) -> Gate:
        """The report as the gate stores an undecided one: every finding pending, for the worker's re-check."""
        findings = [replace(f, evidence_state="pending", anchor=None) for f in self.report.findings]
        return Gate(replace(self.report, findings=findings), True, None, self.repository_id)


def refusal_errors(report: ReportInput, result: EvidenceResult) -> dict[str, list[str]]:
    """The 422's errors of a refused check (empty when nothing was refused), named as validation names fields."""
    if result.commit == "refused":
        errors = {"commit_sha": [result.reason or "not found"]}
    else:
        errors = {
            f"findings[{i}].{found.field or 'file'}": [found.reason or "not found"]
            for i, found in enumerate(result.findings)
            if found.state == "refused"
        }
    return sarif_errors(errors, report.sarif_origins) if report.sarif_origins and errors else errors


async def gate_report(account_id: int, host: str, owner: str, name: str, report: ReportInput) -> Gate | None:
    """The report checked at its commit, or None when no check applies (EVIDENCE_CHECK=off, a host without a
    forge, a repository not registered: its transaction answers that). Raises the 422 of a refusal, after storing
    its `report_refusals` row in a transaction of its own."""
    host, owner, name = normalize_ref(host, owner, name)
    if not evidence_enabled(host):
        return None
    refs = [FindingRef(f.file_path, f.line_start, f.line_end) for f in report.findings]
    deadline = time.monotonic() + forge_budget_seconds()
    checked = await check_listed(host, owner, name, report.commit_sha, refs, deadline=deadline)
    if checked is None:
        return None
    repository_id, result = checked
    errors = refusal_errors(report, result)
    if errors:
        field, messages = next(iter(errors.items()))
        async with db.transaction() as session:
            await session.execute(
                _REFUSED, {"aid": account_id, "rid": repository_id, "reason": f"{field}: {messages[0]}"}
            )
        raise ValidationError(errors)
    pending = not result.decided  # then every finding waits for the others: one publication per report
    findings = [
        replace(f, evidence_state="pending" if pending else found.state, anchor=found.anchor)
        for f, found in zip(report.findings, result.findings, strict=True)
    ]
    return Gate(replace(report, findings=findings), pending, result.committed_at, repository_id)
