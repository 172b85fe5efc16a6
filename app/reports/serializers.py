"""The report API's answers (`app.reports.types`, docs/domain.md §9), read inside the writing transaction so the
response shows exactly what was committed."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, TypedDict
from urllib.parse import quote

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.kernel.answers import columns, iso, uuid_text
from app.kernel.config import settings
from app.reports.assimilation import Link
from app.reports.held import EMBARGO
from app.reports.policy import RepositoryRow
from app.reports.rows import OCCURRENCE_COLUMNS
from app.reports.types import (
    Check,
    Confirmation,
    FindingDetail,
    FindingEvidence,
    FindingRepository,
    Report,
    ReportFinding,
)
from app.reports.validation import ReportInput


def record_path(host: str, owner: str, name: str) -> str:
    return "/repos/" + "/".join(quote(part, safe="") for part in (host, owner, name))


def finding_url(public_id: object) -> str:
    return f"{settings().base_url}/findings/{public_id}"


_REPORT = """
SELECT s.id, s.commit_sha, s.model, s.prompt_version, s.run_id, s.provenance, s.review_kind, s.findings_count,
       s.verified_at, s.review_status, s.visibility, s.commit_committed_at, s.published_at IS NULL AS pending,
       r.host, r.owner, r.name, r.listing_status
FROM scans s JOIN repositories r ON r.id = s.repository_id WHERE s.id = :id
"""

_FINDINGS = """
SELECT f.public_id, c.public_id AS canonical_public_id, c.pattern_key, f.title, f.severity, f.disposition,
       f.evidence_state, f.anchor, f.held_reason
FROM scan_findings f LEFT JOIN canonical_findings c ON c.id = f.canonical_finding_id
WHERE f.scan_id = :id ORDER BY f.position, f.id
"""


class StoredReport(TypedDict):
    """A report as `_REPORT` reads it, or as `new_report` has it without reading: what `report_answer` shows."""

    id: int
    commit_sha: str
    model: str | None
    prompt_version: str | None
    run_id: str | None
    provenance: str
    review_kind: str
    findings_count: int
    verified_at: datetime | bool | None  # True: verified by its own submission (set without reading the time)
    review_status: str
    visibility: str
    commit_committed_at: datetime | None
    pending: bool
    host: str
    owner: str
    name: str
    listing_status: str


class StoredFinding(TypedDict):
    """A report's finding as `_FINDINGS` reads it, or as `linked_rows` / `pending_rows` have it without reading."""

    public_id: uuid.UUID
    canonical_public_id: uuid.UUID | None
    pattern_key: str | None
    title: str
    severity: str
    disposition: str
    evidence_state: str
    anchor: str | None
    held_reason: str | None


def new_report(
    report: ReportInput, repo: RepositoryRow, scan_id: int, *, pending: bool, committed_at: datetime | None
) -> StoredReport:
    """A report just stored, as `_REPORT` reads it (before it is settled: not verified, its listing as found)."""
    return {
        "id": scan_id, "commit_sha": report.commit_sha, "model": report.model,
        "prompt_version": report.prompt_version, "run_id": report.run_id, "provenance": report.provenance,
        "review_kind": report.review_kind, "findings_count": len(report.findings), "verified_at": None,
        "review_status": "quarantined", "visibility": "public", "commit_committed_at": committed_at,
        "pending": pending, "host": repo.host, "owner": repo.owner, "name": repo.name,
        "listing_status": repo.listing_status,
    }  # fmt: skip


def linked_rows(
    report: ReportInput,
    links: Sequence[Link],
    stored: Sequence[tuple[int, uuid.UUID]],
    *,
    held: str | None = None,
    embargoed: Collection[int] = (),
) -> list[StoredFinding]:
    """A new report's findings as `_FINDINGS` reads them, from what its statements returned: `held` the reason all
    of them are held for (low signal), `embargoed` the canonicals whose occurrences an embargo holds."""
    return [
        {
            "public_id": public_id,
            "canonical_public_id": link.canonical.public_id,
            "pattern_key": link.canonical.pattern_key,
            "title": f.title,
            "severity": f.severity,
            "disposition": link.disposition,
            "evidence_state": f.evidence_state,
            "anchor": f.anchor,
            "held_reason": held or (EMBARGO if link.canonical.id in embargoed else None),
        }
        for f, link, (_id, public_id) in zip(report.findings, links, stored, strict=True)
    ]


def pending_rows(report: ReportInput, stored: Sequence[Any]) -> list[StoredFinding]:
    """A pending report's findings (unlinked) as `_FINDINGS` reads them."""
    return [
        {
            "public_id": row.public_id,
            "canonical_public_id": None,
            "pattern_key": None,
            "title": f.title,
            "severity": f.severity,
            "disposition": f.disposition,
            "evidence_state": "pending",
            "anchor": f.anchor,
            "held_reason": None,
        }
        for f, row in zip(report.findings, stored, strict=True)
    ]


def finding_detail(f: Mapping[str, Any]) -> FindingDetail:
    """A finding occurrence in full from its row (the twin's columns): one builder for the finding's twin and a
    maintainer's view of it while it is embargoed."""
    return FindingDetail(
        **columns(f, f"{OCCURRENCE_COLUMNS} description disposition confirmations_count disputes_count commit_sha"),
        public_id=str(f["public_id"]),
        canonical_public_id=uuid_text(f["canonical_public_id"]),
        reported_at=iso(f["reported_at"]),
        repository=FindingRepository(host=f["host"], owner=f["owner"], name=f["name"]),
    )


async def report_response(session: AsyncSession, scan_id: int) -> Report:
    """The 201 body of a report submission."""
    s = (await session.execute(text(_REPORT), {"id": scan_id})).mappings().one()
    findings = (await session.execute(text(_FINDINGS), {"id": scan_id})).mappings().all()
    return report_answer(s, findings)


def report_answer(s: Mapping[Any, Any], findings: Sequence[Mapping[Any, Any]]) -> Report:
    """A report from its row (`_REPORT`) and its findings' rows (`_FINDINGS`)."""
    committed_at: datetime | None = s["commit_committed_at"]
    return Report(
        **columns(
            s, "id host commit_sha model prompt_version run_id provenance review_kind findings_count review_status"
        ),
        visibility=s["visibility"],
        kind="report",
        repository=f"{s['owner']}/{s['name']}",
        commit_committed_at=None if committed_at is None else committed_at.isoformat(),
        provenance_attestation="self_reported",
        verified=s["verified_at"] is not None,
        disclosed=s["visibility"] in ("public", "public_summary")
        and s["listing_status"] != "quarantined"
        and not s["pending"]
        and not any(f["held_reason"] for f in findings),
        record_url=settings().base_url + record_path(s["host"], s["owner"], s["name"]),
        findings=[
            ReportFinding(
                **columns(f, "pattern_key title severity disposition"),
                public_id=str(f["public_id"]),
                canonical_public_id=uuid_text(f["canonical_public_id"]),
                url=finding_url(f["public_id"]),
                evidence=FindingEvidence(state=f["evidence_state"], commit=s["commit_sha"], anchor=f["anchor"]),
                held=f["held_reason"],
            )
            for f in findings
        ],
    )


async def check_response(session: AsyncSession, check_id: int, *, reason: str | None) -> Check:
    """The 201 body of a check: the canonical finding's new status and tallies, and whether (or why not) this check
    counts."""
    row = (
        (
            await session.execute(
                text(
                    "SELECT ch.id, c.public_id, ch.verdict, ch.commit_sha, ch.provenance, c.status,"
                    " c.confirmations_count, c.disputes_count FROM canonical_finding_checks ch"
                    " JOIN canonical_findings c ON c.id = ch.canonical_finding_id WHERE ch.id = :id"
                ),
                {"id": check_id},
            )
        )
        .mappings()
        .one()
    )
    return Check(
        **columns(row, "id verdict commit_sha provenance status confirmations_count disputes_count"),
        canonical_public_id=str(row["public_id"]),
        counted=reason is None,
        reason=reason,
    )


async def confirmation_response(session: AsyncSession, confirmation_id: int, *, checks_recorded: int) -> Confirmation:
    """The 201 body of a report-level verdict."""
    row = (
        (
            await session.execute(
                text(
                    "SELECT sc.id, sc.scan_id, sc.verdict, sc.provenance, s.commit_sha, s.confirmations_count,"
                    " s.disputes_count, s.verified_at, s.review_status FROM scan_confirmations sc"
                    " JOIN scans s ON s.id = sc.scan_id WHERE sc.id = :id"
                ),
                {"id": confirmation_id},
            )
        )
        .mappings()
        .one()
    )
    return Confirmation(
        **columns(row, "id verdict provenance commit_sha confirmations_count disputes_count review_status"),
        report_id=row["scan_id"],
        verified=row["verified_at"] is not None,
        checks_recorded=checks_recorded,
    )
