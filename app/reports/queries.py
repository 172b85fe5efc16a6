"""Public reads of reports and findings, each filtered by what the viewer may see (`app.record.visibility`)."""

from __future__ import annotations

import typing
import uuid

from sqlalchemy import ARRAY, Boolean, Text, and_, any_, bindparam, cast, or_, select, text

from app.kernel import db
from app.kernel.actors import ANONYMOUS, Viewer
from app.kernel.sql import compiled
from app.record.public import listed_repository, public_occurrence, published_scan
from app.record.visibility import report_access, visible_visibilities
from app.registry.models import Repository
from app.reports.models import CanonicalFinding, Scan, ScanFinding
from app.reports.rows import CheckRow, FindingRow, RecentReport, ReportFindingRow, RepositoryReport

REPORTS_PER_REPOSITORY_MAX = 50
FINDINGS_PER_PAGE_MAX = 500
CHECKS_PER_FINDING_MAX = 50
RECENT_REPORTS_MAX = 50


_S, _R = Scan.__table__.alias("s"), Repository.__table__.alias("r")
_REPORTS = select(
    *(
        _S.c[name]
        for name in (
            "id",
            "commit_sha",
            "model",
            "provenance",
            "review_kind",
            "review_status",
            "visibility",
            "findings_count",
            "inserted_at",
        )
    )
)
# the viewer's visibilities; a report a gate holds back (`published_at` NULL) for privileged viewers only
_VISIBLE = and_(
    _S.c.visibility == any_(cast(bindparam("visibilities"), ARRAY(Text))),
    or_(published_scan(_S), bindparam("unpublished", type_=Boolean)),
)
_NEWEST_FIRST = (_S.c.inserted_at.desc(), _S.c.id.desc())

_REPOSITORY_REPORTS = compiled(
    _REPORTS.where(_S.c.repository_id == bindparam("repository_id"), _VISIBLE)
    .order_by(*_NEWEST_FIRST)
    .limit(bindparam("limit"))
)

_FINDINGS_OF_REPORTS = text("""
SELECT f.scan_id, f.public_id, f.title, f.severity, f.file_path, f.line_start, f.line_end,
       c.status, c.pattern_key
FROM scan_findings f
LEFT JOIN canonical_findings c ON c.id = f.canonical_finding_id
WHERE f.scan_id = ANY(CAST(:scan_ids AS bigint[])) AND (f.published_at IS NOT NULL OR :unpublished)
ORDER BY f.scan_id DESC, f.position, f.id
LIMIT :limit
""")

_RECENT_REPORTS = compiled(
    _REPORTS.add_columns(_S.c.repository_id, _R.c.host, _R.c.owner, _R.c.name, _R.c.listing_status)
    .select_from(_S.join(_R, _R.c.id == _S.c.repository_id))
    .where(listed_repository(_R), _VISIBLE)
    .order_by(*_NEWEST_FIRST)
    .limit(bindparam("limit"))
)

_FINDING = text("""
SELECT f.id, f.public_id, f.title, f.severity, f.file_path, f.line_start, f.line_end, f.description,
       f.disposition, f.inserted_at,
       s.id AS scan_id, s.commit_sha, s.visibility, s.model, s.provenance, s.inserted_at AS reported_at,
       r.id AS repository_id, r.host, r.owner, r.name, r.listing_status,
       c.id AS canonical_id, c.public_id AS canonical_public_id, c.status, c.pattern_key,
       c.confirmations_count, c.disputes_count, c.detections_count, c.last_seen_commit_sha,
       EXISTS (SELECT 1 FROM infestation_patterns p WHERE p.pattern_key = c.pattern_key) AS has_infestation,
       f.published_at IS NOT NULL AND s.published_at IS NOT NULL AS published
FROM scan_findings f
JOIN scans s ON s.id = f.scan_id
JOIN repositories r ON r.id = s.repository_id
LEFT JOIN canonical_findings c ON c.id = f.canonical_finding_id
WHERE f.public_id = :public_id
""")

_CHECKS = text("""
SELECT k.verdict, k.provenance, k.commit_sha, k.inserted_at
FROM canonical_finding_checks k
WHERE k.canonical_finding_id = :canonical_id
ORDER BY k.inserted_at DESC, k.id DESC
LIMIT :limit
""")


async def list_repository_reports(
    repository_id: int, listing_status: str, *, viewer: Viewer = ANONYMOUS, limit: int = 20
) -> list[RepositoryReport]:
    """Newest reports of one repository that `viewer` may see; full ones carry their findings (capped)."""
    limit = max(1, min(limit, REPORTS_PER_REPOSITORY_MAX))
    async with db.read_session() as session:
        rows = (
            await session.execute(
                _REPOSITORY_REPORTS,
                {
                    "repository_id": repository_id,
                    "visibilities": visible_visibilities(viewer),
                    "unpublished": viewer.privileged,
                    "limit": limit,
                },
            )
        ).mappings()
        reports: list[RepositoryReport] = []
        for row in rows:
            access = report_access(viewer, listing_status=listing_status, visibility=row["visibility"])
            if access != "hidden":
                reports.append(typing.cast(RepositoryReport, {**row, "access": access, "findings": []}))
        full = {r["id"]: r for r in reports if r["access"] == "full"}
        if full:
            findings = (
                await session.execute(
                    _FINDINGS_OF_REPORTS,
                    {"scan_ids": list(full), "limit": FINDINGS_PER_PAGE_MAX, "unpublished": viewer.privileged},
                )
            ).mappings()
            for finding in findings:
                full[finding["scan_id"]]["findings"].append(typing.cast(ReportFindingRow, dict(finding)))
    return reports


async def list_recent_public_reports(*, viewer: Viewer = ANONYMOUS, limit: int = 10) -> list[RecentReport]:
    """Newest reports on listed repositories (headers only: the home page lists, it does not expand)."""
    limit = max(1, min(limit, RECENT_REPORTS_MAX))
    async with db.read_session() as session:
        rows = (
            await session.execute(
                _RECENT_REPORTS,
                {"visibilities": visible_visibilities(viewer), "unpublished": viewer.privileged, "limit": limit},
            )
        ).mappings()
        reports: list[RecentReport] = []
        for row in rows:
            access = report_access(viewer, listing_status=row["listing_status"], visibility=row["visibility"])
            if access != "hidden":
                reports.append(typing.cast(RecentReport, {**row, "access": access}))
    return reports


async def get_finding(public_id: uuid.UUID, *, viewer: Viewer = ANONYMOUS) -> FindingRow | None:
    """One finding occurrence with its canonical status and checks, or None when `viewer` may not see it in
    full (restricted or summary-only report, quarantined repository) or it does not exist."""
    async with db.reader() as read:
        found = await read.maps(_FINDING, {"public_id": public_id})
        row = found[0] if found else None
        if row is None:
            return None
        access = report_access(
            viewer, listing_status=row["listing_status"], visibility=row["visibility"], published=row["published"]
        )
        if access != "full":
            return None
        checks: list[CheckRow] = []
        if row["canonical_id"] is not None:
            params = {"canonical_id": row["canonical_id"], "limit": CHECKS_PER_FINDING_MAX}
            checks = [typing.cast(CheckRow, c) for c in await read.maps(_CHECKS, params)]
    return typing.cast(FindingRow, {**row, "checks": checks})


_F, _C = ScanFinding.__table__.alias("f"), CanonicalFinding.__table__.alias("c")
_NEWEST_PUBLIC_OCCURRENCE = compiled(
    select(_F.c.public_id)
    .select_from(
        _F.join(_C, _C.c.id == _F.c.canonical_finding_id)
        .join(_S, _S.c.id == _F.c.scan_id)
        .join(_R, _R.c.id == _S.c.repository_id)
    )
    .where(_C.c.public_id == bindparam("canonical_public_id"), public_occurrence(_F, _S, _R))
    .order_by(*_NEWEST_FIRST, _F.c.id.desc())
    .limit(1)
)


async def newest_public_occurrence(canonical_public_id: uuid.UUID) -> uuid.UUID | None:
    """The public id of the canonical finding's newest occurrence in the public join set (a public report on a
    listed repository), or None: where `/findings/{canonical_public_id}` sends a visitor."""
    async with db.read_session() as session:
        found = await session.scalar(_NEWEST_PUBLIC_OCCURRENCE, {"canonical_public_id": canonical_public_id})
    return found if found is None else uuid.UUID(str(found))
