from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    SmallInteger,
    Text,
    Uuid,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from app.kernel.columns import Timestamps, closed_sets, one_of
from app.kernel.db import Base

PROVENANCES = ("agent", "human", "hybrid")
REVIEW_KINDS = ("code_review", "threat_model", "privacy_review", "business_logic")
REVIEW_STATUSES = ("quarantined", "accepted", "rejected", "contested")
# what each review status means, for pages and feeds (the API keeps the value): a report's "quarantined" is not
# a quarantined repository's takedown (docs/domain.md "Two quarantines")
REVIEW_STATUS_WORDS = {
    "quarantined": "awaiting independent checks",
    "accepted": "accepted",
    "rejected": "rejected",
    "contested": "contested",
}
VISIBILITIES = ("restricted", "public_summary", "public")
SEVERITIES = ("critical", "high", "medium", "low", "info")
DISPOSITIONS = ("new", "matches_existing", "regression", "not_reproduced")
CANONICAL_STATUSES = ("open", "verified", "disputed", "fixed")
CHECK_VERDICTS = ("confirmed", "disputed", "fixed")
CONFIRMATION_VERDICTS = ("confirmed", "disputed")
# a finding's evidence at its commit (docs/domain.md "Evidence at the commit"): confirmed and unchecked may publish
EVIDENCE_STATES = ("confirmed", "pending", "refused", "expired", "unchecked")
# coordinated disclosure (docs/domain.md "Coordinated disclosure"): a finding with no `disclosures` row was public
# at once ("immediate"); why an embargo ended
DISCLOSURE_STATES = ("embargoed", "published")
PUBLISHED_BECAUSE = ("deadline", "fixed", "maintainer", "moderator", "reporter")

PATTERN_PRESENT = "pattern_key IS NOT NULL AND pattern_key <> ''"


class Scan(Timestamps, Base):
    """A report: one submission against a repository at a commit."""

    __tablename__ = "scans"
    __table_args__ = (
        CheckConstraint("commit_sha ~ '^[0-9a-f]{40}$'", name="commit_sha"),
        *closed_sets(
            provenance=PROVENANCES, review_kind=REVIEW_KINDS, review_status=REVIEW_STATUSES, visibility=VISIBILITIES
        ),
        CheckConstraint("findings_count >= 0 AND confirmations_count >= 0 AND disputes_count >= 0", name="counts"),
        CheckConstraint("disclosure_days BETWEEN 7 AND 90", name="disclosure_days"),
        Index("scans_repository_inserted_idx", "repository_id", text("inserted_at DESC")),
        Index("scans_submitted_by_id_idx", "submitted_by_id"),
        Index("scans_public_record_idx", "repository_id", "review_status", "visibility", text("inserted_at DESC")),
        Index("scans_reviewed_by_id_idx", "reviewed_by_id"),
        Index("scans_public_repo_idx", "repository_id", "id", postgresql_where=text("visibility = 'public'")),
        Index(
            "scans_submitter_run_id_idx",
            "submitted_by_id",
            "run_id",
            unique=True,
            postgresql_where=text("run_id IS NOT NULL"),
        ),
        Index("scans_inserted_at_idx", text("inserted_at DESC"), "id"),
        Index("scans_evidence_due_idx", "evidence_next_at", postgresql_where=text("evidence_next_at IS NOT NULL")),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    submitted_by_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="RESTRICT"))
    commit_sha: Mapped[str] = mapped_column(Text)
    model: Mapped[str | None] = mapped_column(Text)
    prompt_version: Mapped[str | None] = mapped_column(Text)
    run_id: Mapped[str | None] = mapped_column(Text)
    provenance: Mapped[str] = mapped_column(Text, server_default="agent")
    review_kind: Mapped[str] = mapped_column(Text, server_default="code_review")
    notes: Mapped[str | None] = mapped_column(Text)
    findings_count: Mapped[int] = mapped_column(Integer, server_default="0")
    confirmations_count: Mapped[int] = mapped_column(Integer, server_default="0")
    disputes_count: Mapped[int] = mapped_column(Integer, server_default="0")
    verified_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    review_status: Mapped[str] = mapped_column(Text, server_default="quarantined")
    visibility: Mapped[str] = mapped_column(Text, server_default="public")
    moderation_reason: Mapped[str | None] = mapped_column(Text)
    moderation_notes: Mapped[str | None] = mapped_column(Text)
    reviewed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    reviewed_by_id: Mapped[int | None] = mapped_column(ForeignKey("accounts.id", ondelete="SET NULL"))
    raw_document: Mapped[str | None] = mapped_column(Text)
    # NULL while its evidence is pending: the stored half of `publishable` (app/record/public.py)
    published_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), server_default=func.now())
    commit_committed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    evidence_attempts: Mapped[int] = mapped_column(Integer, server_default="0")
    evidence_next_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    disclosure_days: Mapped[int | None] = mapped_column(SmallInteger)  # the reporter's embargo request, 7-90


class ScanFinding(Timestamps, Base):
    """A finding occurrence: immutable except for its link to the canonical finding."""

    __tablename__ = "scan_findings"
    __table_args__ = (
        *closed_sets(severity=SEVERITIES, disposition=DISPOSITIONS, evidence_state=EVIDENCE_STATES),
        CheckConstraint(
            "(line_start IS NULL AND line_end IS NULL) OR "
            "(line_start >= 1 AND line_end >= line_start AND line_end <= 1000000)",
            name="lines",
        ),
        Index("scan_findings_public_id_idx", "public_id", unique=True),
        Index("scan_findings_scan_id_idx", "scan_id"),
        Index("scan_findings_canonical_finding_id_idx", "canonical_finding_id"),
        Index("scan_findings_fingerprint_idx", "fingerprint"),
        # the occurrences earned trust counts as refused (app/trust/outcomes.py): few, found without a scan
        Index("scan_findings_refused_idx", "id", postgresql_where=text("evidence_state IN ('refused', 'expired')")),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    public_id: Mapped[uuid.UUID] = mapped_column(Uuid, server_default=text("gen_random_uuid()"))
    scan_id: Mapped[int] = mapped_column(ForeignKey("scans.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer, server_default="0")
    file_path: Mapped[str] = mapped_column(Text)
    line_start: Mapped[int | None] = mapped_column(Integer)
    line_end: Mapped[int | None] = mapped_column(Integer)
    severity: Mapped[str] = mapped_column(Text)
    title: Mapped[str] = mapped_column(Text)
    description: Mapped[str] = mapped_column(Text)
    canonical_finding_id: Mapped[int | None] = mapped_column(ForeignKey("canonical_findings.id", ondelete="RESTRICT"))
    fingerprint: Mapped[str | None] = mapped_column(Text)
    disposition: Mapped[str] = mapped_column(Text, server_default="new")
    claimed_canonical_public_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    # a SARIF result's partialFingerprints, as the scanner wrote them (docs/sarif.md)
    partial_fingerprints: Mapped[dict[str, str] | None] = mapped_column(JSONB(none_as_null=True))
    # NULL while a gate holds the occurrence back (evidence, embargo, low signal): see app/record/public.py
    published_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), server_default=func.now())
    evidence_state: Mapped[str] = mapped_column(Text, server_default="unchecked")
    evidence_reason: Mapped[str | None] = mapped_column(Text)
    anchor: Mapped[str | None] = mapped_column(Text)  # sha256 of the cited lines (app/forge/lines.py)
    rule_id: Mapped[str | None] = mapped_column(Text)  # a SARIF result's ruleId
    held_reason: Mapped[str | None] = mapped_column(Text)


class CanonicalFinding(Timestamps, Base):
    """Repository-level issue memory. `updated_at` moves only when a value really changes: it drives every
    infestation window."""

    __tablename__ = "canonical_findings"
    __table_args__ = (
        one_of("status", CANONICAL_STATUSES),
        Index("canonical_findings_public_id_idx", "public_id", unique=True),
        Index("canonical_findings_repo_fingerprint_idx", "repository_id", "fingerprint", unique=True),
        Index("canonical_findings_repo_status_idx", "repository_id", "status"),
        Index("canonical_findings_updated_idx", "updated_at"),  # what moved since earned trust's last run
        Index("canonical_findings_fingerprint_idx", "fingerprint"),
        Index(
            "canonical_findings_pattern_repo_idx",
            "pattern_key",
            "repository_id",
            postgresql_where=text(PATTERN_PRESENT),
        ),
        Index("canonical_findings_pattern_status_idx", "pattern_key", "status", postgresql_where=text(PATTERN_PRESENT)),
        Index(
            "canonical_findings_pattern_updated_idx",
            "pattern_key",
            text("updated_at DESC"),
            postgresql_where=text(PATTERN_PRESENT),
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    public_id: Mapped[uuid.UUID] = mapped_column(Uuid, server_default=text("gen_random_uuid()"))
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    fingerprint: Mapped[str] = mapped_column(Text)
    pattern_key: Mapped[str | None] = mapped_column(Text)
    file_path: Mapped[str | None] = mapped_column(Text)
    line_start: Mapped[int | None] = mapped_column(Integer)
    line_end: Mapped[int | None] = mapped_column(Integer)
    severity: Mapped[str | None] = mapped_column(Text)
    title: Mapped[str] = mapped_column(Text)
    description: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(Text, server_default="open")
    first_seen_commit_sha: Mapped[str] = mapped_column(Text)
    last_seen_commit_sha: Mapped[str] = mapped_column(Text)
    detections_count: Mapped[int] = mapped_column(Integer, server_default="0")
    distinct_submitters_count: Mapped[int] = mapped_column(Integer, server_default="0")
    distinct_models_count: Mapped[int] = mapped_column(Integer, server_default="0")
    confirmations_count: Mapped[int] = mapped_column(Integer, server_default="0")
    disputes_count: Mapped[int] = mapped_column(Integer, server_default="0")
    verified_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # is the code still there? newest first, at most 20 (docs/domain.md "Observations")
    observations: Mapped[list[dict[str, Any]]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))


class Verdict(Timestamps):
    """The columns a check and a report-level confirmation share: one account's verdict, its provenance and
    evidence, and the hashed client address the quorum's collusion rule reads."""

    verdict: Mapped[str] = mapped_column(Text)
    provenance: Mapped[str] = mapped_column(Text, server_default="human")
    notes: Mapped[str] = mapped_column(Text)
    evidence: Mapped[str | None] = mapped_column(Text)
    client_ip_hash: Mapped[bytes | None] = mapped_column(LargeBinary)


class CanonicalFindingCheck(Verdict, Base):
    __tablename__ = "canonical_finding_checks"
    __table_args__ = (
        *closed_sets(verdict=CHECK_VERDICTS, provenance=PROVENANCES),
        Index("canonical_finding_checks_unique_idx", "canonical_finding_id", "account_id", "commit_sha", unique=True),
        Index("canonical_finding_checks_account_id_idx", "account_id"),
        Index(
            "canonical_finding_checks_ip_idx",
            "canonical_finding_id",
            "client_ip_hash",
            postgresql_where=text("client_ip_hash IS NOT NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    canonical_finding_id: Mapped[int] = mapped_column(ForeignKey("canonical_findings.id", ondelete="CASCADE"))
    scan_finding_id: Mapped[int | None] = mapped_column(ForeignKey("scan_findings.id", ondelete="SET NULL"))
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="RESTRICT"))
    commit_sha: Mapped[str] = mapped_column(Text)


class ScanConfirmation(Verdict, Base):
    """A report-level verdict; copied onto a check for every canonical of the report at its commit."""

    __tablename__ = "scan_confirmations"
    __table_args__ = (
        *closed_sets(verdict=CONFIRMATION_VERDICTS, provenance=PROVENANCES),
        Index("scan_confirmations_unique_idx", "scan_id", "account_id", unique=True),
        Index("scan_confirmations_account_id_idx", "account_id"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    scan_id: Mapped[int] = mapped_column(ForeignKey("scans.id", ondelete="CASCADE"))
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="RESTRICT"))


class ForgeCommit(Base):
    """What a forge said of a commit: in the repository's default-branch history or not (the evidence cache)."""

    __tablename__ = "forge_commits"

    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"), primary_key=True)
    commit_sha: Mapped[str] = mapped_column(Text, primary_key=True)
    present: Mapped[bool] = mapped_column(Boolean)
    committed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    checked_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class ForgeFile(Base):
    """A file at a commit: whether it is there, and one sha256 per line (app/forge/lines.py), so the anchor of any
    range is computed without fetching it again."""

    __tablename__ = "forge_files"

    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"), primary_key=True)
    commit_sha: Mapped[str] = mapped_column(Text, primary_key=True)
    path: Mapped[str] = mapped_column(Text, primary_key=True)
    present: Mapped[bool] = mapped_column(Boolean)
    line_digests: Mapped[bytes | None] = mapped_column(LargeBinary)
    checked_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class ReportRefusal(Base):
    """One refused submission (the evidence check): who, where, why. Non-authoritative: the earned-trust count."""

    __tablename__ = "report_refusals"
    __table_args__ = (
        Index("report_refusals_account_inserted_idx", "account_id", "inserted_at"),
        Index("report_refusals_inserted_idx", "inserted_at"),  # earned trust's look at what is new
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"))
    repository_id: Mapped[int | None] = mapped_column(ForeignKey("repositories.id", ondelete="SET NULL"))
    reason: Mapped[str] = mapped_column(Text)
    inserted_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class Disclosure(Base):
    """A canonical finding's coordinated-disclosure clock: while `embargoed` its occurrences are held
    (`scan_findings.held_reason = 'embargo'`); `extensions` lists each change of the deadline by a person."""

    __tablename__ = "disclosures"
    __table_args__ = (
        *closed_sets(state=DISCLOSURE_STATES, published_because=PUBLISHED_BECAUSE),
        CheckConstraint("(state = 'published') = (published_at IS NOT NULL)", name="published_when"),
        Index("disclosures_open_deadline_idx", "deadline", postgresql_where=text("state = 'embargoed'")),
        Index("disclosures_repository_idx", "repository_id", "state"),
        Index("disclosures_published_idx", "published_at", postgresql_where=text("state = 'published'")),
    )

    canonical_finding_id: Mapped[int] = mapped_column(
        ForeignKey("canonical_findings.id", ondelete="CASCADE"), primary_key=True
    )
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    state: Mapped[str] = mapped_column(Text, server_default="embargoed")
    reported_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    deadline: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    reporter_days: Mapped[int | None] = mapped_column(SmallInteger)
    repository_days: Mapped[int] = mapped_column(SmallInteger, server_default="0")
    notified_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    acknowledged_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    extensions: Mapped[list[dict[str, Any]]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    published_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    published_because: Mapped[str | None] = mapped_column(Text)
    inserted_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
