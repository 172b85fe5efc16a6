from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, Text, func
from sqlalchemy.orm import Mapped, mapped_column

from app.kernel.columns import Inserted
from app.kernel.db import Base


class InstanceLease(Base):
    """Singleton leases: exactly one holder fleet-wide per name (self-healing: expired leases are taken over)."""

    __tablename__ = "instance_leases"

    name: Mapped[str] = mapped_column(Text, primary_key=True)
    holder: Mapped[str] = mapped_column(Text)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    acquired_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class JobRun(Base):
    """Last completed run of each fleet-wide job (cutover-check reads the reconcile's)."""

    __tablename__ = "job_runs"

    name: Mapped[str] = mapped_column(Text, primary_key=True)
    holder: Mapped[str] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    detail: Mapped[str | None] = mapped_column(Text)


class AppSecret(Inserted, Base):
    """Secrets generated at first boot; first writer wins so every instance uses the same value."""

    __tablename__ = "app_secrets"

    name: Mapped[str] = mapped_column(Text, primary_key=True)
    value: Mapped[str] = mapped_column(Text)
