from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    SmallInteger,
    Text,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.kernel.columns import Timestamps, closed_sets
from app.kernel.db import Base

LISTING_STATUSES = ("pending", "listed", "quarantined")
REPOSITORY_STATUSES = ("unscanned", "scanning", "findings", "reviewed", "stale")
PARTICIPATION_MODES = ("unclaimed", "community", "maintainer_verified", "curated", "paused")
# the forge's metadata: looked up (found), to look up again (pending: the forge failed), never asked (unchecked)
METADATA_STATES = ("unchecked", "pending", "found")


class Repository(Timestamps, Base):
    __tablename__ = "repositories"
    __table_args__ = (
        *closed_sets(
            listing_status=LISTING_STATUSES,
            status=REPOSITORY_STATUSES,
            participation_mode=PARTICIPATION_MODES,
            metadata_state=METADATA_STATES,
        ),
        CheckConstraint("disclosure_days BETWEEN 0 AND 90", name="disclosure_days"),
        Index("repositories_host_owner_name_idx", "host", "owner", "name", unique=True),
        Index("repositories_status_idx", "status"),
        Index("repositories_last_scanned_at_idx", "last_scanned_at"),
        Index("repositories_listing_inserted_idx", "listing_status", "inserted_at"),
        Index("repositories_submitted_by_id_idx", "submitted_by_id"),
        Index("repositories_listed_id_idx", "id", postgresql_where=text("listing_status = 'listed'")),
        # search: name prefix first, then owner/name substring
        Index("repositories_name_pattern_idx", "name", postgresql_ops={"name": "text_pattern_ops"}),
        Index("repositories_owner_pattern_idx", "owner", postgresql_ops={"owner": "text_pattern_ops"}),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    host: Mapped[str] = mapped_column(Text, server_default="github.com")
    owner: Mapped[str] = mapped_column(Text)
    name: Mapped[str] = mapped_column(Text)
    canonical_url: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(Text, server_default="unscanned")
    scan_count: Mapped[int] = mapped_column(Integer, server_default="0")
    open_findings_count: Mapped[int] = mapped_column(Integer, server_default="0")
    verified_findings_count: Mapped[int] = mapped_column(Integer, server_default="0")
    last_scanned_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    description: Mapped[str | None] = mapped_column(Text)
    primary_language: Mapped[str | None] = mapped_column(Text)
    stars_count: Mapped[int] = mapped_column(Integer, server_default="0")
    forks_count: Mapped[int] = mapped_column(Integer, server_default="0")
    archived: Mapped[bool] = mapped_column(Boolean, server_default="false")
    participation_mode: Mapped[str] = mapped_column(Text, server_default="unclaimed")
    listing_status: Mapped[str] = mapped_column(Text, server_default="listed")
    submitted_by_id: Mapped[int | None] = mapped_column(ForeignKey("accounts.id", ondelete="SET NULL"))
    # the forge's own record (app/registry/metadata.py)
    default_branch: Mapped[str | None] = mapped_column(Text)
    forge_id: Mapped[str | None] = mapped_column(Text)
    metadata_state: Mapped[str] = mapped_column(Text, server_default="unchecked")
    metadata_etag: Mapped[str | None] = mapped_column(Text)
    metadata_checked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    forge_missing_runs: Mapped[int] = mapped_column(Integer, server_default="0")
    forge_redirect: Mapped[str | None] = mapped_column(Text)  # the name the forge redirected to, for moderators
    observed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # a verified maintainer's coordinated-disclosure window in days (0: none; docs/domain.md "Coordinated disclosure")
    disclosure_days: Mapped[int] = mapped_column(SmallInteger, server_default="0")
