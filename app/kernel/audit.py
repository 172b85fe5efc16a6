"""The audit log (authoritative): one row per moderation or administration action, in the action's transaction."""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, ForeignKey, Index, Text, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from app.kernel.columns import Inserted
from app.kernel.db import Base


class AuditEvent(Inserted, Base):
    """Moderation and administration audit log (authoritative). One row per action, same transaction."""

    __tablename__ = "audit_events"
    __table_args__ = (
        Index("audit_events_inserted_idx", text("inserted_at DESC"), text("id DESC")),
        Index("audit_events_subject_idx", "subject_type", "subject_id"),
        Index("audit_events_actor_id_idx", "actor_id"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    actor_id: Mapped[int | None] = mapped_column(ForeignKey("accounts.id", ondelete="SET NULL"))
    action: Mapped[str] = mapped_column(Text)
    subject_type: Mapped[str] = mapped_column(Text)
    subject_id: Mapped[str] = mapped_column(Text)
    before: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    after: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    reason: Mapped[str | None] = mapped_column(Text)
    notes: Mapped[str | None] = mapped_column(Text)


async def record_audit(
    session: AsyncSession,
    *,
    actor_id: int | None,
    action: str,
    subject_type: str,
    subject_id: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    reason: str | None,
    notes: str | None,
) -> AuditEvent:
    """Add one audit event to the caller's transaction and flush it (its id is known on return)."""
    event = AuditEvent(
        actor_id=actor_id,
        action=action,
        subject_type=subject_type,
        subject_id=subject_id,
        before=before,
        after=after,
        reason=reason,
        notes=notes,
    )
    session.add(event)
    await session.flush()
    return event


async def latest_event_id(session: AsyncSession) -> int:
    """The id of the newest audit event (0 when none). Every takedown (visibility, listing, hard delete) is an
    audited action, so a new value tells every process, not just the one that committed it, that cached public
    derived data may show rows that left the public join set (docs/domain.md §5.7)."""
    return int((await session.execute(text("SELECT coalesce(max(id), 0) FROM audit_events"))).scalar_one())
