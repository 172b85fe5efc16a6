"""The change feed's tables (`changes`, the published set: `published_repositories`, `published_findings`,
`published_canonicals`), its entry kinds, and the commit-order numbering trigger (docs/domain.md §13 "Change feed")."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Index,
    Text,
    Uuid,
    column,
    func,
    literal,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.kernel.audit import COMMIT_ORDER_LOCK, at_commit_trigger
from app.kernel.columns import closed_sets
from app.kernel.db import Base
from app.kernel.sql import compose

PUBLISHED = "finding.published"
STATUS = "finding.status"
FINDING_WITHDRAWN = "finding.withdrawn"
LISTED_KIND = "repository.listed"
REPOSITORY_WITHDRAWN = "repository.withdrawn"
# a maintainer's statement (docs/domain.md "Maintainers"): written by the statement service in its transaction
FINDING_STATEMENT = "finding.statement"
# a published canonical's code seen in another state at its default branch's head (app/evidence/observe.py)
FINDING_OBSERVED = "finding.observed"
KINDS = (PUBLISHED, STATUS, FINDING_WITHDRAWN, LISTED_KIND, REPOSITORY_WITHDRAWN, FINDING_STATEMENT, FINDING_OBSERVED)
WITHDRAWAL_KINDS = (FINDING_WITHDRAWN, REPOSITORY_WITHDRAWN)
OBSERVATION_REASONS = ("file_missing", "lines_changed")  # why an observation found the code absent
REASONS = ("moderation", "repository", "deleted")

COMMIT_SEQUENCE = "changes_commit_seq"


class Change(Base):
    """One feed entry. `seq` is NULL until the writing transaction commits (see the module docstring)."""

    __tablename__ = "changes"
    __table_args__ = (
        *closed_sets(kind=KINDS, reason=(*REASONS, *OBSERVATION_REASONS)),
        Index("changes_seq_idx", "seq", unique=True),
        Index("changes_unnumbered_idx", "id", postgresql_where=text("seq IS NULL")),
        Index("changes_finding_idx", "finding", postgresql_where=text("finding IS NOT NULL")),
        Index(
            "changes_withdrawals_idx",
            "seq",
            postgresql_where=column("kind").in_(WITHDRAWAL_KINDS),
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)  # insertion order within a transaction
    seq: Mapped[int | None] = mapped_column(BigInteger)  # commit order, what readers see
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    kind: Mapped[str] = mapped_column(Text)
    finding: Mapped[uuid.UUID | None] = mapped_column(Uuid)  # occurrence public_id
    canonical: Mapped[uuid.UUID | None] = mapped_column(Uuid)  # canonical public_id
    repository_id: Mapped[int | None] = mapped_column(BigInteger)  # internal, never served; no FK (deletes)
    repository_key: Mapped[uuid.UUID | None] = mapped_column(Uuid)  # the opaque repository id
    pattern_key: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str | None] = mapped_column(Text)
    reason: Mapped[str | None] = mapped_column(Text)
    # finding.statement: the statement (finding_statements.id) the entry announces, rendered from its current
    # visibility; no FK (entries outlive deletes)
    statement_id: Mapped[int | None] = mapped_column(BigInteger)
    commit_sha: Mapped[str | None] = mapped_column(Text)  # finding.observed: the head commit observed


class PublishedRepository(Base):
    """A repository the feed has mentioned: its opaque id (a random uuid, stable for the repository's life and kept
    after a hard delete) and whether the feed last announced it listed."""

    __tablename__ = "published_repositories"
    __table_args__ = (Index("published_repositories_opaque_id_idx", "opaque_id", unique=True),)

    repository_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    opaque_id: Mapped[uuid.UUID] = mapped_column(Uuid, server_default=text("gen_random_uuid()"))
    listed: Mapped[bool] = mapped_column(Boolean)


class PublishedFinding(Base):
    """An occurrence the feed announced as public and has not withdrawn."""

    __tablename__ = "published_findings"
    __table_args__ = (
        Index("published_findings_scan_idx", "scan_id"),
        Index("published_findings_repository_idx", "repository_id"),
        Index("published_findings_canonical_idx", "canonical_id"),
    )

    scan_finding_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    public_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    scan_id: Mapped[int] = mapped_column(BigInteger)
    repository_id: Mapped[int] = mapped_column(BigInteger)
    canonical_id: Mapped[int] = mapped_column(BigInteger)


class PublishedCanonical(Base):
    """A canonical with at least one published occurrence, and the status the feed last announced for it."""

    __tablename__ = "published_canonicals"
    __table_args__ = (Index("published_canonicals_repository_idx", "repository_id"),)

    canonical_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    public_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    repository_id: Mapped[int] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(Text)


# The commit-order numbering (installed by migration 0005). Row-level (constraint triggers are), but only the first
# event of a transaction finds unnumbered rows: it takes the lock and numbers all of them in insertion order.
NUMBERING_FUNCTION = compose(
    """
CREATE OR REPLACE FUNCTION changes_number_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- numbered already (by this transaction's first event): a key probe. Rescanning the pending index instead would
  -- walk the entries of every row numbered so far (they stay until vacuum): quadratic in the transaction's entries
  IF NOT EXISTS (SELECT 1 FROM changes WHERE id = NEW.id AND seq IS NULL) THEN
    RETURN NULL;
  END IF;
  PERFORM pg_advisory_xact_lock({lock});
  UPDATE changes c SET seq = n.seq
  FROM (SELECT id, nextval('changes_commit_seq') AS seq
        FROM (SELECT id FROM changes WHERE seq IS NULL ORDER BY id) pending) n
  WHERE c.id = n.id;
  RETURN NULL;
END $$
""",
    lock=literal(COMMIT_ORDER_LOCK),
).sql
NUMBERING_TRIGGER = at_commit_trigger("changes_number_at_commit", "changes", "seq")

# Number this transaction's pending entries now (the lock is held): the deferred trigger then finds none.
NUMBER_PENDING = """
UPDATE changes c SET seq = n.seq
FROM (SELECT id, nextval('changes_commit_seq') AS seq
      FROM (SELECT id FROM changes WHERE seq IS NULL ORDER BY id) pending) n
WHERE c.id = n.id
"""
NUMBER_PENDING_STATEMENT = text(NUMBER_PENDING)
