from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    Text,
    func,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.kernel.columns import Inserted, one_of
from app.kernel.db import Base
from app.kernel.sql import Name, statement

OUTCOMES = ("verified", "disputed", "withdrawn", "refused")
PINS = ("gated", "open")


class FindingOutcome(Inserted, Base):
    """One decision about a finding its reporter is measured by: written once, never changed (an outcome latches).
    Exactly one subject: a canonical finding (its first published report's), an occurrence the evidence check
    refused later, or a submission it refused at once."""

    __tablename__ = "finding_outcomes"
    __table_args__ = (
        one_of("outcome", OUTCOMES),
        CheckConstraint("num_nonnulls(canonical_finding_id, scan_finding_id, refusal_id) = 1", name="one_subject"),
        # one outcome per subject
        *(
            Index(
                f"finding_outcomes_{subject}_idx",
                subject,
                unique=True,
                postgresql_where=statement("{subject} IS NOT NULL", subject=Name(subject)),
            )
            for subject in ("canonical_finding_id", "scan_finding_id", "refusal_id")
        ),
        Index("finding_outcomes_account_decided_idx", "account_id", "decided_at"),
        Index("finding_outcomes_decided_idx", "decided_at"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    canonical_finding_id: Mapped[int | None] = mapped_column(ForeignKey("canonical_findings.id", ondelete="CASCADE"))
    scan_finding_id: Mapped[int | None] = mapped_column(ForeignKey("scan_findings.id", ondelete="CASCADE"))
    refusal_id: Mapped[int | None] = mapped_column(ForeignKey("report_refusals.id", ondelete="CASCADE"))
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"))
    provenance: Mapped[str | None] = mapped_column(Text)
    model: Mapped[str | None] = mapped_column(Text)
    prompt_version: Mapped[str | None] = mapped_column(Text)
    tool: Mapped[str | None] = mapped_column(Text)
    rule_id: Mapped[str | None] = mapped_column(Text)
    outcome: Mapped[str] = mapped_column(Text)
    reason: Mapped[str] = mapped_column(Text)
    decided_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class AccountSignal(Base):
    """An account's signal as the worker last counted it, and a moderator's pin of its gate."""

    __tablename__ = "account_signals"
    __table_args__ = (one_of("pin", PINS),)

    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"), primary_key=True)
    decided: Mapped[int] = mapped_column(Integer, server_default="0")
    verified: Mapped[int] = mapped_column(Integer, server_default="0")
    precision: Mapped[float] = mapped_column(Float, server_default="0.5")
    gated: Mapped[bool] = mapped_column(Boolean, server_default="false")
    pin: Mapped[str | None] = mapped_column(Text)
    pin_reason: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
