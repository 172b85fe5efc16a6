"""Reports and findings as the public reads return them (`app.reports.queries`). TypedDicts, not structs: pages outside
this feature read them by key (the home page's recent reports in `app.site.routes`), and a finding's row goes to
`serializers.finding_detail`, which also takes `app.maintainers.embargoed`'s rows."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TypedDict


class _Occurrence(TypedDict):
    """What every finding row shows of the occurrence, and of its canonical finding (None while unlinked)."""

    public_id: uuid.UUID
    title: str
    severity: str
    file_path: str
    line_start: int | None
    line_end: int | None
    status: str | None
    pattern_key: str | None


# the columns of `_Occurrence` an answer copies unchanged (its public id is sent as text)
OCCURRENCE_COLUMNS = "title severity file_path line_start line_end status pattern_key"


class ReportFindingRow(_Occurrence):
    """A finding of a report a repository page expands (`_FINDINGS_OF_REPORTS`)."""

    scan_id: int


class _ReportHeader(TypedDict):
    """A report's header (`_REPORTS`) and the viewer's access to it (`report_access`: a hidden one is not listed)."""

    id: int
    commit_sha: str
    model: str | None
    provenance: str
    review_kind: str
    review_status: str
    visibility: str
    findings_count: int
    inserted_at: datetime
    access: str


class RepositoryReport(_ReportHeader):
    """A report on a repository page; a full one with its findings (capped)."""

    findings: list[ReportFindingRow]


class RecentReport(_ReportHeader):
    """A report on the home page, with its repository (`_RECENT_REPORTS`)."""

    repository_id: int
    host: str
    owner: str
    name: str
    listing_status: str


class CheckRow(TypedDict):
    """A check of a finding's canonical finding (`_CHECKS`)."""

    verdict: str
    provenance: str
    commit_sha: str
    inserted_at: datetime


class FindingRow(_Occurrence):
    """One finding occurrence in full (`_FINDING`), with its report, repository, canonical finding and its checks."""

    id: int
    description: str
    disposition: str
    inserted_at: datetime
    scan_id: int
    commit_sha: str
    visibility: str
    model: str | None
    provenance: str
    reported_at: datetime
    repository_id: int
    host: str
    owner: str
    name: str
    listing_status: str
    canonical_id: int | None
    canonical_public_id: uuid.UUID | None
    confirmations_count: int | None
    disputes_count: int | None
    detections_count: int | None
    last_seen_commit_sha: str | None
    has_infestation: bool
    published: bool
    checks: list[CheckRow]
