"""Maintainers' right of reply (docs/domain.md "Maintainers"): claims proved by a file on the forge, the verified
maintainers of a repository, their OpenVEX statements on its findings, and the signed webhooks that tell them
first (with one delivery row per change-feed entry and webhook)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    SmallInteger,
    Text,
    Uuid,
    func,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.kernel.columns import Inserted, closed_sets
from app.kernel.db import Base

CLAIM_STATES = ("pending", "verified")
# why a maintainership ended: the file was gone on two rechecks, a moderator ended it, the account was banned or
# suspended, or the forge kept answering a redirect or 401 over three rechecks at least a day apart
END_REASONS = ("file_missing", "moderation", "account_locked", "proof_unreachable")
# the modes a verification replaces (and the last maintainer's end restores); paused and curated stay
REPLACEABLE_MODES = ("unclaimed", "community")

# OpenVEX 0.2.0
VEX_STATUSES = ("not_affected", "affected", "fixed", "under_investigation")
VEX_JUSTIFICATIONS = (
    "component_not_present",
    "vulnerable_code_not_present",
    "vulnerable_code_not_in_execute_path",
    "vulnerable_code_cannot_be_controlled_by_adversary",
    "inline_mitigations_already_exist",
)
STATEMENT_VISIBILITIES = ("shown", "hidden")


class MaintainerClaim(Inserted, Base):
    """An account's request to maintain a repository: the one-time token it must commit to the forge. At most one
    pending claim per account and repository; a verified claim is kept as the maintainership's proof."""

    __tablename__ = "maintainer_claims"
    __table_args__ = (
        *closed_sets(state=CLAIM_STATES),
        CheckConstraint("(state = 'verified') = (verified_at IS NOT NULL)", name="verified_at"),
        Index(
            "maintainer_claims_pending_idx",
            "repository_id",
            "account_id",
            unique=True,
            postgresql_where=text("state = 'pending'"),
        ),
        Index("maintainer_claims_account_idx", "account_id", "repository_id"),
        Index("maintainer_claims_repository_idx", "repository_id"),
        # pruning of claims that expired unverified
        Index("maintainer_claims_expires_idx", "expires_at", postgresql_where=text("state = 'pending'")),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"))
    # not a secret: it is meant to be published in the repository; shown again to its account while pending
    token: Mapped[str] = mapped_column(Text)
    state: Mapped[str] = mapped_column(Text, server_default="pending")
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    verified_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class RepositoryMaintainer(Base):
    """One maintainership: an account verified as maintaining a repository, from `since` until `ended_at`.
    Ended rows are kept (history, and the quorum's conflict rule reads them: docs/domain.md "Maintainers")."""

    __tablename__ = "repository_maintainers"
    __table_args__ = (
        *closed_sets(ended_reason=END_REASONS, replaced_mode=REPLACEABLE_MODES),
        CheckConstraint("(ended_at IS NULL) = (ended_reason IS NULL)", name="ended"),
        # one current maintainership per account and repository; the repository's maintainers list
        Index(
            "repository_maintainers_current_idx",
            "repository_id",
            "account_id",
            unique=True,
            postgresql_where=text("ended_at IS NULL"),
        ),
        # "is this account (or was it) a maintainer of this repository" (quorum, statements, the account's list)
        Index("repository_maintainers_account_idx", "account_id", "repository_id"),
        Index("repository_maintainers_repository_idx", "repository_id"),
        # the daily recheck: current maintainerships, least recently checked first
        Index(
            "repository_maintainers_recheck_idx",
            text("last_checked_at NULLS FIRST"),
            "id",
            postgresql_where=text("ended_at IS NULL"),
        ),
        Index("repository_maintainers_claim_idx", "claim_id"),
        Index("repository_maintainers_ended_by_idx", "ended_by_id"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"))
    claim_id: Mapped[int | None] = mapped_column(ForeignKey("maintainer_claims.id", ondelete="SET NULL"))
    since: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    # the participation mode the repository had before its maintainers' era began (unclaimed or community), carried
    # from maintainer to maintainer; NULL when verification changed nothing (paused, curated). The last current
    # maintainer's end restores it if the mode is still maintainer_verified.
    replaced_mode: Mapped[str | None] = mapped_column(Text)
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    ended_reason: Mapped[str | None] = mapped_column(Text)
    ended_by_id: Mapped[int | None] = mapped_column(ForeignKey("accounts.id", ondelete="SET NULL"))
    last_checked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # the first of consecutive rechecks that found the file gone (NULL once it is found again): two-404 rule
    first_missing_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # the first of consecutive rechecks the forge answered a redirect or 401, and how many such rechecks (at most
    # one counted a day); both cleared by any other answer: the proof_unreachable rule
    first_unreachable_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    unreachable_checks: Mapped[int] = mapped_column(SmallInteger, server_default="0")


class FindingStatement(Inserted, Base):
    """A maintainer's OpenVEX statement on a canonical finding. All are kept; the newest shown one is current.
    A moderator's hide (audited) is a takedown of the statement."""

    __tablename__ = "finding_statements"
    __table_args__ = (
        *closed_sets(status=VEX_STATUSES, justification=VEX_JUSTIFICATIONS, visibility=STATEMENT_VISIBILITIES),
        CheckConstraint(
            "status <> 'not_affected' OR justification IS NOT NULL OR impact_statement IS NOT NULL",
            name="not_affected_reason",
        ),
        CheckConstraint("status <> 'affected' OR action_statement IS NOT NULL", name="affected_action"),
        CheckConstraint("fixed_in IS NULL OR (status = 'fixed' AND fixed_in ~ '^[0-9a-f]{40}$')", name="fixed_in"),
        # the current statement of a canonical: newest shown first
        Index(
            "finding_statements_current_idx",
            "canonical_finding_id",
            text("inserted_at DESC"),
            text("id DESC"),
            postgresql_where=text("visibility = 'shown'"),
        ),
        Index("finding_statements_canonical_idx", "canonical_finding_id", "id"),
        Index("finding_statements_author_idx", "author_id"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    canonical_finding_id: Mapped[int] = mapped_column(ForeignKey("canonical_findings.id", ondelete="CASCADE"))
    author_id: Mapped[int | None] = mapped_column(ForeignKey("accounts.id", ondelete="SET NULL"))
    status: Mapped[str] = mapped_column(Text)
    justification: Mapped[str | None] = mapped_column(Text)
    impact_statement: Mapped[str | None] = mapped_column(Text)
    action_statement: Mapped[str | None] = mapped_column(Text)
    fixed_in: Mapped[str | None] = mapped_column(Text)  # 40 lowercase hex
    visibility: Mapped[str] = mapped_column(Text, server_default="shown")


class Webhook(Inserted, Base):
    """A maintainer's signed webhook for one repository. The secret is the HMAC-SHA256 key: it must be stored to
    sign (docs/security.md), and is shown once, at registration."""

    __tablename__ = "webhooks"
    __table_args__ = (
        CheckConstraint("consecutive_failures >= 0", name="consecutive_failures"),
        Index("webhooks_repository_idx", "repository_id"),
        Index("webhooks_owner_idx", "owner_id"),
        # the dispatcher: enabled webhooks
        Index("webhooks_enabled_idx", "repository_id", "id", postgresql_where=text("disabled_at IS NULL")),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    owner_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"))
    url: Mapped[str] = mapped_column(Text)  # https (http only with WEBHOOK_ALLOW_PRIVATE=1)
    secret: Mapped[str] = mapped_column(Text)
    disabled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # failure state: the first failure of the current streak and its length (reset by a delivery)
    failing_since: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    consecutive_failures: Mapped[int] = mapped_column(Integer, server_default="0")
    # the change-feed seq up to which entries were turned into deliveries (starts at the feed's head when registered)
    enqueued_seq: Mapped[int] = mapped_column(BigInteger, server_default="0")
    last_delivered_seq: Mapped[int | None] = mapped_column(BigInteger)


class WebhookDelivery(Inserted, Base):
    """One change-feed entry for one webhook, kept until delivered and after (the delivery log). The delivery id is
    the same on every retry (receivers deduplicate by it)."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        CheckConstraint("attempts >= 0", name="attempts"),
        CheckConstraint("(seq IS NULL) = (canonical_finding_id IS NOT NULL)", name="private_entry"),
        Index("webhook_deliveries_webhook_seq_idx", "webhook_id", "seq", unique=True),
        # `finding.embargoed`: one private delivery per canonical and webhook (migration 0015)
        Index(
            "webhook_deliveries_embargoed_idx",
            "webhook_id",
            "canonical_finding_id",
            unique=True,
            postgresql_where=text("canonical_finding_id IS NOT NULL"),
        ),
        Index(
            "webhook_deliveries_canonical_idx",
            "canonical_finding_id",
            postgresql_where=text("canonical_finding_id IS NOT NULL"),
        ),
        Index("webhook_deliveries_delivery_idx", "delivery", unique=True),
        # per webhook, the oldest undelivered entry (seq order) ...
        Index("webhook_deliveries_pending_idx", "webhook_id", "seq", postgresql_where=text("delivered_at IS NULL")),
        # ... and which are due (the heads: the rest have no next_attempt_at)
        Index(
            "webhook_deliveries_due_idx",
            "next_attempt_at",
            postgresql_where=text("delivered_at IS NULL AND next_attempt_at IS NOT NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    webhook_id: Mapped[int] = mapped_column(ForeignKey("webhooks.id", ondelete="CASCADE"))
    # changes.seq (no FK: the feed's seq is unique but not a key); NULL for a private entry (`finding.embargoed`)
    seq: Mapped[int | None] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(Text)  # the entry's kind, for the log and X-Tarakan-Event
    # a private entry's canonical finding: rendered from its embargo, never from the change feed
    canonical_finding_id: Mapped[int | None] = mapped_column(ForeignKey("canonical_findings.id", ondelete="CASCADE"))
    delivery: Mapped[uuid.UUID] = mapped_column(Uuid, server_default=text("gen_random_uuid()"))
    attempts: Mapped[int] = mapped_column(Integer, server_default="0")
    # when it is tried next; only the oldest undelivered entry of an enabled webhook has one (seq order: the rest
    # wait for it, NULL), so the due index holds exactly what may be sent (migration 0009)
    next_attempt_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_status: Mapped[int | None] = mapped_column(Integer)  # the receiver's HTTP status; NULL: no answer
    last_error: Mapped[str | None] = mapped_column(Text)  # timeout, refused address, ... (no receiver text)
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class WebhookFanout(Base):
    """One row: the change-feed seq up to which the worker's fan-out turned entries into deliveries (each webhook's
    `enqueued_seq` is only where its own entries start: the feed's head when it was registered)."""

    __tablename__ = "webhook_fanout"
    __table_args__ = (CheckConstraint("id = 1", name="one_row"),)

    id: Mapped[int] = mapped_column(SmallInteger, primary_key=True, autoincrement=False)
    seq: Mapped[int] = mapped_column(BigInteger)
