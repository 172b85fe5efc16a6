"""Column helpers the models share: CHECK constraints over a closed set of values, and the timestamp columns."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import CheckConstraint, DateTime, func
from sqlalchemy.orm import Mapped, mapped_column


def one_of(column: str, values: tuple[str, ...]) -> CheckConstraint:
    """`CHECK (column IN (...))`, named after the column (the naming convention prefixes the table)."""
    return CheckConstraint(f"{column} IN ({', '.join(repr(v) for v in values)})", name=column)


def closed_sets(**columns: tuple[str, ...]) -> tuple[CheckConstraint, ...]:
    """`one_of` for each `column=values` pair: a table's closed-set columns in one line."""
    return tuple(one_of(column, values) for column, values in columns.items())


class Inserted:
    """`inserted_at`, set by the database when the row is written."""

    inserted_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class Timestamps(Inserted):
    """`inserted_at` and `updated_at`; services move `updated_at` only when a value really changes."""

    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
