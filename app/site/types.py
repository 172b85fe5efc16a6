"""The JSON twins of the site's composed pages as typed structures: the home page, a repository's record, a
finding's record and its tombstone."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from app.disclosure.ledger import RepositoryDisclosures
from app.infestations.rows import Infestation, RepositoryInfestation
from app.kernel.answers import UNSET, Answer, Sha, Timestamp, UnsetType, Uuid, enum
from app.maintainers.statement_types import MaintainerStatement, RepositoryMaintainerEntry
from app.record.models import REASONS
from app.record.observations import Observation
from app.registry.types import PublicRepository
from app.reports.embargo import DisclosureAnswer
from app.reports.types import CheckVerdict, FindingDetail, Provenance


class HomeStats(Answer):
    repositories: int
    unscanned: int
    open_findings: int
    verified_findings: int
    contributors: int


class RecentReport(Answer):
    id: int
    repository: str
    host: str
    commit_sha: Sha
    provenance: Provenance
    model: str | None
    visibility: str
    findings_count: Annotated[int | None, Meta(description="null for a summary-only report")]
    inserted_at: Timestamp | None


class Home(Answer):
    stats: HomeStats
    infestations: list[Infestation]
    recent_reports: list[RecentReport]


class RecordFinding(Answer):
    """A finding of a report on a repository's record."""

    public_id: Uuid
    title: str
    severity: str | None
    file_path: str
    line_start: int | None
    line_end: int | None
    status: str | None
    pattern_key: str | None
    url: str
    maintainer_statement: MaintainerStatement | None
    observation: Annotated[Observation | None, Meta(description="the newest look at the default branch's head")] = None


class RecordReport(Answer):
    """A report on a repository's record: a summary-only report stops at the header."""

    id: int
    commit_sha: Sha
    model: str | None
    provenance: Provenance
    review_kind: str
    review_status: str
    visibility: str
    inserted_at: Timestamp | None
    findings_count: int | UnsetType = UNSET
    findings: list[RecordFinding] | UnsetType = UNSET


class Burden(Answer):
    """What the findings reported about a repository came to: decided, and of those disputed or refused."""

    decided: int
    disputed: int
    refused: int


class RepositoryRecord(Answer):
    repository: PublicRepository
    reports: list[RecordReport]
    infestations: list[RepositoryInfestation]
    maintainers: Annotated[list[RepositoryMaintainerEntry], Meta(description="its current verified maintainers")]
    burden: Burden
    disclosures: Annotated[
        RepositoryDisclosures,
        Meta(description="its findings under coordinated disclosure: severity and dates only, until publication"),
    ]


class FindingCheck(Answer):
    verdict: CheckVerdict
    provenance: Provenance
    commit_sha: Sha
    inserted_at: Timestamp | None


class FindingRecord(Answer):
    finding: FindingDetail
    checks: list[FindingCheck]
    maintainer_statement: MaintainerStatement | None
    disclosure: Annotated[
        DisclosureAnswer, Meta(description="its coordinated-disclosure clock (`immediate` when it had none)")
    ]
    observations: Annotated[
        list[Observation], Meta(description="is the code still there? the default branch's head, newest first, last 20")
    ] = []


class Tombstone(Answer):
    """A withdrawn finding's record (410): its id, when and the reason class, nothing else."""

    finding: Uuid
    withdrawn_at: Timestamp
    reason: Annotated[str, enum(REASONS)]
