"""The atlas's JSON twins as typed structures, built from the query modules' rows: the infestation map
(docs/domain.md §5.7, `app.infestations.rows.INFESTATION_KEYS`), ledger rows (§4.4, `INSTANCE_KEYS`), affected
repositories, and the index and show twins."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from msgspec import Meta

from app.kernel.answers import Answer, Timestamp, Uuid, enum, iso
from app.kernel.paging import Page
from app.reports.models import CANONICAL_STATUSES

STATUS_CHOICES = ("all", "open", "verified", "fixed", "disputed")  # the index's status filter
Status = Annotated[str, enum(CANONICAL_STATUSES)]
Row = Mapping[str, Any]


class Infestation(Answer):
    """The infestation map: the same keys on every path; counts of the requested window."""

    pattern_key: Annotated[str, Meta(pattern="^[0-9a-f]{64}$")]
    title: str
    severity: str | None
    sample_file_path: Annotated[str | None, Meta(description="null once the sample's report is taken down")]
    sample_occurrence_public_id: Uuid | None
    repo_count: int
    instance_count: int
    open_count: int
    verified_count: int
    fixed_count: int
    disputed_count: int
    last_seen_at: Timestamp | None
    first_seen_at: Timestamp | None


def infestation(row: Row) -> Infestation:
    return Infestation(
        pattern_key=row["pattern_key"],
        title=row["title"],
        severity=row["severity"],
        sample_file_path=row["sample_file_path"],
        sample_occurrence_public_id=row["sample_occurrence_public_id"],
        repo_count=row["repo_count"],
        instance_count=row["instance_count"],
        open_count=row["open_count"],
        verified_count=row["verified_count"],
        fixed_count=row["fixed_count"],
        disputed_count=row["disputed_count"],
        last_seen_at=iso(row["last_seen_at"]),
        first_seen_at=iso(row["first_seen_at"]),
    )


class RepositoryInfestation(Infestation):
    """The infestation map plus one repository's share of it (a repository's record)."""

    repository_instance_count: int
    repository_open_count: int
    repository_status: Status
    repository_occurrence_public_id: Uuid | None


def repository_infestation(row: Row) -> RepositoryInfestation:
    return RepositoryInfestation(
        pattern_key=row["pattern_key"],
        title=row["title"],
        severity=row["severity"],
        sample_file_path=row["sample_file_path"],
        sample_occurrence_public_id=row["sample_occurrence_public_id"],
        repo_count=row["repo_count"],
        instance_count=row["instance_count"],
        open_count=row["open_count"],
        verified_count=row["verified_count"],
        fixed_count=row["fixed_count"],
        disputed_count=row["disputed_count"],
        last_seen_at=iso(row["last_seen_at"]),
        first_seen_at=iso(row["first_seen_at"]),
        repository_instance_count=row["repository_instance_count"],
        repository_open_count=row["repository_open_count"],
        repository_status=row["repository_status"],
        repository_occurrence_public_id=row["repository_occurrence_public_id"],
    )


class Instance(Answer):
    """One ledger row."""

    id: int
    public_id: Uuid
    occurrence_public_id: Uuid | None
    status: Status
    severity: str | None
    title: str
    file_path: str | None
    detections_count: int
    confirmations_count: int
    host: str
    owner: str
    name: str
    repository_id: Annotated[int, Meta(description="the repository's serial id (see repository_uuid)")]
    repository_uuid: Annotated[
        Uuid | None,
        Meta(
            description="the repository's opaque id, as the change feed and the export name it (null until the feed "
            "has announced the repository)"
        ),
    ]
    commit_sha: str | None
    scan_id: int | None
    updated_at: Timestamp | None


def instance(row: Row) -> Instance:
    return Instance(
        id=row["id"],
        public_id=row["public_id"],
        occurrence_public_id=row["occurrence_public_id"],
        status=row["status"],
        severity=row["severity"],
        title=row["title"],
        file_path=row["file_path"],
        detections_count=row["detections_count"],
        confirmations_count=row["confirmations_count"],
        host=row["host"],
        owner=row["owner"],
        name=row["name"],
        repository_id=row["repository_id"],
        repository_uuid=row["repository_uuid"],
        commit_sha=row["commit_sha"],
        scan_id=row["scan_id"],
        updated_at=iso(row["updated_at"]),
    )


class AffectedRepository(Answer):
    """A repository affected by the pattern."""

    id: int
    repository_id: Annotated[int, Meta(description="the repository's serial id (see repository_uuid)")]
    repository_uuid: Annotated[
        Uuid | None,
        Meta(
            description="the repository's opaque id, as the change feed and the export name it (null until the feed "
            "has announced the repository)"
        ),
    ]
    host: str
    owner: str
    name: str
    status: Status
    severity: str | None
    title: str | None
    instance_count: int
    open_count: int
    occurrence_public_id: Uuid | None
    updated_at: Timestamp | None


def affected_repository(row: Row) -> AffectedRepository:
    return AffectedRepository(
        id=row["id"],
        repository_id=row["repository_id"],
        repository_uuid=row["repository_uuid"],
        host=row["host"],
        owner=row["owner"],
        name=row["name"],
        status=row["status"],
        severity=row["severity"],
        title=row["title"],
        instance_count=row["instance_count"],
        open_count=row["open_count"],
        occurrence_public_id=row["occurrence_public_id"],
        updated_at=iso(row["updated_at"]),
    )


class InstancePage(Answer):
    """A keyset page of the ledger."""

    entries: list[Instance]
    next_cursor: str | None


def instance_page(page: Page[dict[str, Any]]) -> InstancePage:
    return InstancePage(entries=[instance(row) for row in page["entries"]], next_cursor=page["next_cursor"])


class AffectedRepositoryPage(Answer):
    """A keyset page of affected repositories."""

    entries: list[AffectedRepository]
    next_cursor: str | None


def affected_repository_page(page: Page[dict[str, Any]]) -> AffectedRepositoryPage:
    entries = [affected_repository(row) for row in page["entries"]]
    return AffectedRepositoryPage(entries=entries, next_cursor=page["next_cursor"])


class InfestationFilters(Answer):
    """The filters the index answered (clamped) and the window whose counts it read."""

    days: Annotated[int, Meta(ge=1, le=365)]
    min_repos: int
    status: Annotated[str, enum(STATUS_CHOICES)]
    limit: int
    counts_window_days: int


class InfestationList(Answer):
    items: list[Infestation]
    refreshed_at: Timestamp | None
    filters: InfestationFilters


class InfestationShow(Answer):
    infestation: Infestation
    refreshed_at: Timestamp | None
    repositories: AffectedRepositoryPage
    instances: InstancePage
