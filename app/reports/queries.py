"""Public reads of reports and findings, each filtered by what the viewer may see (`app.record.visibility`)."""

from __future__ import annotations

import typing
import uuid

from sqlalchemy import ARRAY, Boolean, Text, and_, any_, bindparam, cast, or_, select, text

from app.kernel import db
from app.kernel.actors import ANONYMOUS, Viewer
from app.kernel.sql import Fragment, compiled
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

# A finding page's rows in one statement (issue 39: each statement costs the web process about 0.13 ms of CPU):
# the occurrence, its canonical's newest checks as one array per column (`_checks`) and its observation ledger;
# the finding page adds its statement (app.site.records). Read with `finding_params`, judged by `finding_of`.
FINDING = Fragment("""
SELECT f.id, f.public_id, f.title, f.severity, f.file_path, f.line_start, f.line_end, f.description,
       f.disposition, f.inserted_at,
       s.id AS scan_id, s.commit_sha, s.visibility, s.model, s.provenance, s.inserted_at AS reported_at,
       r.id AS repository_id, r.host, r.owner, r.name, r.listing_status,
       c.id AS canonical_id, c.public_id AS canonical_public_id, c.status, c.pattern_key,
       c.confirmations_count, c.disputes_count, c.detections_count, c.last_seen_commit_sha,
       EXISTS (SELECT 1 FROM infestation_patterns p WHERE p.pattern_key = c.pattern_key) AS has_infestation,
       f.published_at IS NOT NULL AND s.published_at IS NOT NULL AS published,
       k.verdicts, k.provenances, k.commit_shas, k.checked_at, c.observations
FROM scan_findings f
JOIN scans s ON s.id = f.scan_id
JOIN repositories r ON r.id = s.repository_id
LEFT JOIN canonical_findings c ON c.id = f.canonical_finding_id
LEFT JOIN LATERAL (
  SELECT array_agg(k.verdict ORDER BY k.inserted_at DESC, k.id DESC) AS verdicts,
         array_agg(k.provenance ORDER BY k.inserted_at DESC, k.id DESC) AS provenances,
         array_agg(k.commit_sha ORDER BY k.inserted_at DESC, k.id DESC) AS commit_shas,
         array_agg(k.inserted_at ORDER BY k.inserted_at DESC, k.id DESC) AS checked_at
  FROM (
    SELECT k.id, k.verdict, k.provenance, k.commit_sha, k.inserted_at
    FROM canonical_finding_checks k
    WHERE k.canonical_finding_id = c.id
    ORDER BY k.inserted_at DESC, k.id DESC
    LIMIT :limit
  ) k
) k ON TRUE
WHERE f.public_id = :public_id
""")
_FINDING = FINDING.statement()
_CHECK_ARRAYS = ("verdicts", "provenances", "commit_shas", "checked_at")


def _checks(row: dict[str, typing.Any]) -> list[CheckRow]:
    """The checks of `_FINDING`'s row, newest first, taken out of its arrays."""
    verdicts, provenances, shas, times = (row.pop(name) or () for name in _CHECK_ARRAYS)
    return [
        {"verdict": v, "provenance": p, "commit_sha": sha, "inserted_at": at}
        for v, p, sha, at in zip(verdicts, provenances, shas, times, strict=True)
    ]


async def list_repository_reports(
    read: db.Reader, repository_id: int, listing_status: str, *, viewer: Viewer = ANONYMOUS, limit: int = 20
) -> list[RepositoryReport]:
    """Newest reports of one repository that `viewer` may see; full ones carry their findings (capped). On the
    page's open read."""
    limit = max(1, min(limit, REPORTS_PER_REPOSITORY_MAX))
    params = {
        "repository_id": repository_id,
        "visibilities": visible_visibilities(viewer),
        "unpublished": viewer.privileged,
        "limit": limit,
    }
    reports: list[RepositoryReport] = []
    for row in await read.maps(_REPOSITORY_REPORTS, params):
        access = report_access(viewer, listing_status=listing_status, visibility=row["visibility"])
        if access != "hidden":
            reports.append(typing.cast(RepositoryReport, {**row, "access": access, "findings": []}))
    full = {r["id"]: r for r in reports if r["access"] == "full"}
    if full:
        params = {"scan_ids": list(full), "limit": FINDINGS_PER_PAGE_MAX, "unpublished": viewer.privileged}
        for finding in await read.maps(_FINDINGS_OF_REPORTS, params):
            full[finding["scan_id"]]["findings"].append(typing.cast(ReportFindingRow, finding))
    return reports


async def list_recent_public_reports(*, viewer: Viewer = ANONYMOUS, limit: int = 10) -> list[RecentReport]:
    """Newest reports on listed repositories (headers only: the home page lists, it does not expand)."""
    limit = max(1, min(limit, RECENT_REPORTS_MAX))
    params = {"visibilities": visible_visibilities(viewer), "unpublished": viewer.privileged, "limit": limit}
    async with db.reader() as read:
        rows = await read.maps(_RECENT_REPORTS, params)
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
        found = await read.maps(_FINDING, finding_params(public_id))
    judged = finding_of(found[0] if found else None, viewer)
    return None if judged is None else judged[0]


def finding_params(public_id: uuid.UUID) -> dict[str, typing.Any]:
    return {"public_id": public_id, "limit": CHECKS_PER_FINDING_MAX}


def finding_of(row: dict[str, typing.Any] | None, viewer: Viewer) -> tuple[FindingRow, typing.Any] | None:
    """`FINDING`'s row as the finding `viewer` may see in full (None: they may not, or there is none), and its
    canonical's observation ledger as stored (`app.record.observations.ledger_of` reads it)."""
    if row is None:
        return None
    access = report_access(
        viewer, listing_status=row["listing_status"], visibility=row["visibility"], published=row["published"]
    )
    if access != "full":
        return None
    ledger, checks = row.pop("observations"), _checks(row)  # the row keeps `_FINDING`'s columns of old
    return typing.cast(FindingRow, {**row, "checks": checks}), ledger


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
