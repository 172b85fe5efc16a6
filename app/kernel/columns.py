"""Column helpers the models share: CHECK constraints over a closed set of values, and the timestamps."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import CheckConstraint, DateTime, func
from sqlalchemy.orm import Mapped, mapped_column


def one_of(column: str, values: tuple[str, ...]) -> CheckConstraint:
    """`CHECK (column IN (...))`, named after the column (the naming convention prefixes the table)."""
    return CheckConstraint(f"{column} IN ({', '.join(repr(v) for v in values)})", name=column)


def inserted_at() -> Mapped[datetime]:
    return mapped_column(DateTime(timezone=True), server_default=func.now())


def updated_at() -> Mapped[datetime]:
    return mapped_column(DateTime(timezone=True), server_default=func.now())
