"""Rollup (projection) tables of the infestation atlas. Derived: rebuilt by backfill/reconcile from source."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    ColumnElement,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    Text,
    Uuid,
    case,
    func,
    text,
)
from sqlalchemy.orm import Mapped, MappedColumn, mapped_column

from app.kernel.db import Base
from app.kernel.sql import WINDOW_DAYS, Window, statement

# the counts of a pattern (all-time, and per window); repositories and instances, then instances by status
COUNTS = ("repo_count", "instance_count", "open_count", "verified_count", "fixed_count", "disputed_count")
# the aggregates kept for each window (docs/domain.md §5.3) as `{name}_{W}d`; the all-time columns carry the bare names
WINDOWED_AGGREGATES = (*COUNTS, "last_seen_at")
UNKNOWN_TITLE = "Unknown pattern"  # the title of a pattern whose canonicals have none
ALL_TIME = 0  # `window_days` of the all-time row of infestation_pattern_status_windows
STATUS_WINDOWS = (ALL_TIME, *WINDOW_DAYS)


def status_rank(status: ColumnElement[Any]) -> ColumnElement[int]:
    """The representative instance's status rank: open first, then disputed, verified, fixed (docs/domain.md §4.2)."""
    return case({"open": 0, "disputed": 1, "verified": 2}, value=status, else_=3)


def _window_columns() -> dict[str, MappedColumn[Any]]:
    return {
        f"{name}_{w}d": (
            mapped_column(DateTime(timezone=True), nullable=True)
            if name == "last_seen_at"
            else mapped_column(Integer, nullable=False, server_default="0")
        )
        for w in WINDOW_DAYS
        for name in WINDOWED_AGGREGATES
    }


class InstanceCounts:
    """A pattern's instances, all of them and by status: the all-time counts of a pattern and of its repository rows."""

    instance_count: Mapped[int] = mapped_column(Integer, server_default="0")
    open_count: Mapped[int] = mapped_column(Integer, server_default="0")
    verified_count: Mapped[int] = mapped_column(Integer, server_default="0")
    fixed_count: Mapped[int] = mapped_column(Integer, server_default="0")
    disputed_count: Mapped[int] = mapped_column(Integer, server_default="0")


class InfestationPattern(InstanceCounts, Base):
    __tablename__ = "infestation_patterns"
    __table_args__ = (
        # min/max(refreshed_at): the home fragment's version and the oldest-refresh gauge read one index end
        Index("infestation_patterns_refreshed_at_idx", "refreshed_at"),
        # the atlas feed's "new" half (`list_newest_infestations`) walks it in O(limit), not a sort of every pattern
        Index(
            "infestation_patterns_first_seen_idx",
            text("first_seen_at DESC"),
            "pattern_key",
            postgresql_where=text("repo_count >= 2 AND first_seen_at IS NOT NULL"),
        ),
        # one rank index per window: the ranked list walks it in O(limit); `>= 2` is the list's min_repos floor
        *(
            Index(
                f"infestation_patterns_rank_{w}d_idx",
                statement("repo_count_{w}d DESC", w=w),
                statement("last_seen_at_{w}d DESC NULLS LAST", w=w),
                postgresql_where=statement("repo_count_{w}d >= 2", w=w),
            )
            for w in map(Window, WINDOW_DAYS)
        ),
    )

    pattern_key: Mapped[str] = mapped_column(Text, primary_key=True)
    title: Mapped[str] = mapped_column(Text)
    severity: Mapped[str | None] = mapped_column(Text)
    sample_file_path: Mapped[str | None] = mapped_column(Text)
    sample_occurrence_public_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    repo_count: Mapped[int] = mapped_column(Integer, server_default="0")
    first_seen_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_seen_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # `{name}_{W}d` for every window W and windowed aggregate: the counts default to 0, last_seen_at_Wd is NULL
    # while nothing falls in the window. Generated (not spelled out 28 times); nothing reads them as attributes.
    locals().update(_window_columns())
    refreshed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    inserted_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class InfestationPatternRepo(InstanceCounts, Base):
    """Membership: pattern x listed repository (graph satellites, delist-safe key discovery)."""

    __tablename__ = "infestation_pattern_repos"
    __table_args__ = (
        Index("infestation_pattern_repos_repo_idx", "repository_id"),
        Index(
            "infestation_pattern_repos_pattern_recent_idx",
            "pattern_key",
            text("last_seen_at DESC"),
            text("repository_id DESC"),
        ),
    )

    pattern_key: Mapped[str] = mapped_column(Text, primary_key=True)
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"), primary_key=True)
    primary_status: Mapped[str] = mapped_column(Text, server_default="open")
    severity: Mapped[str | None] = mapped_column(Text)
    title: Mapped[str | None] = mapped_column(Text)
    sample_occurrence_public_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    first_seen_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_seen_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    inserted_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class InfestationPatternInstance(Base):
    """Canonical grain: one row per canonical finding in the public join set."""

    __tablename__ = "infestation_pattern_instances"
    __table_args__ = (
        Index(
            "infestation_pattern_instances_pattern_canonical_idx", "pattern_key", "canonical_finding_id", unique=True
        ),
        Index("infestation_pattern_instances_window_idx", "pattern_key", text("updated_at DESC")),
        Index(
            "infestation_pattern_instances_ledger_idx",
            "pattern_key",
            text("updated_at DESC"),
            text("canonical_finding_id DESC"),
        ),
        Index("infestation_pattern_instances_status_window_idx", "status", text("updated_at DESC"), "pattern_key"),
        Index("infestation_pattern_instances_repo_idx", "repository_id"),
    )

    canonical_finding_id: Mapped[int] = mapped_column(
        ForeignKey("canonical_findings.id", ondelete="CASCADE"), primary_key=True
    )
    pattern_key: Mapped[str] = mapped_column(Text)
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    status: Mapped[str] = mapped_column(Text)
    severity: Mapped[str | None] = mapped_column(Text)
    title: Mapped[str] = mapped_column(Text)
    file_path: Mapped[str | None] = mapped_column(Text)
    sample_occurrence_public_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    sample_scan_id: Mapped[int | None] = mapped_column(BigInteger)
    sample_commit_sha: Mapped[str | None] = mapped_column(Text)
    inserted_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class InfestationPatternStatusWindow(Base):
    """Per-status windowed counts of a pattern (docs/domain.md §1.8): one row per (key, status, window) with at least
    one instance of that status in the window (`window_days` 0 = all time), so a status-filtered list walks one
    rank index in O(limit). Narrow rows rather than 40 more columns on `infestation_patterns`: one partial rank
    index serves all 16 status x window lists (instead of 16 more indexes on a row every refresh rewrites), and a
    status change rewrites only the few rows whose counts moved."""

    __tablename__ = "infestation_pattern_status_windows"
    __table_args__ = (
        # `>= 2` is the list's min_repos floor; pattern_key last so the list's full order comes off the index
        Index(
            "infestation_pattern_status_windows_rank_idx",
            "status",
            "window_days",
            text("repo_count DESC"),
            text("last_seen_at DESC"),
            "pattern_key",
            postgresql_where=text("repo_count >= 2"),
        ),
    )

    pattern_key: Mapped[str] = mapped_column(Text, primary_key=True)
    status: Mapped[str] = mapped_column(Text, primary_key=True)
    window_days: Mapped[int] = mapped_column(Integer, primary_key=True)
    repo_count: Mapped[int] = mapped_column(Integer)
    instance_count: Mapped[int] = mapped_column(Integer)
    last_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class InfestationDirtyKey(Base):
    """Pending rollup work (authoritative until drained): written in the same transaction as the change.

    `version` grows on every re-dirty, so a worker deletes only the version it refreshed. `repository_ids` names the
    repositories whose rows of the key changed (the scoped refresh of docs/domain.md §5.2); NULL = the whole key."""

    __tablename__ = "infestation_dirty_keys"
    __table_args__ = (Index("infestation_dirty_keys_available_idx", "available_at"),)

    pattern_key: Mapped[str] = mapped_column(Text, primary_key=True)
    reason: Mapped[str] = mapped_column(Text)
    version: Mapped[int] = mapped_column(BigInteger, server_default="1")
    dirtied_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    first_dirtied_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    available_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    claimed_by: Mapped[str | None] = mapped_column(Text)
    claimed_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    attempts: Mapped[int] = mapped_column(Integer, server_default="0")
    repository_ids: Mapped[list[int] | None] = mapped_column(ARRAY(BigInteger))


# the tables the rollup read path reads (lists, show pages, satellites, ledgers): cutover-check requires every index
# they declare to exist and be valid (docs/domain.md §13)
ROLLUP_READ_MODELS = (
    InfestationPattern,
    InfestationPatternRepo,
    InfestationPatternInstance,
    InfestationPatternStatusWindow,
)
