"""Runtime flags (docs/domain.md §13 "Feature flag and Cutover gates"): a flag changed by `tarakan flags set` is
followed by every process within `POLL_SECONDS` + one request, without a restart.

The authoritative value is a row of `runtime_settings`, written only by `tarakan flags set` (audited) and removed by
`tarakan flags unset`; migrations never write one. Without a row the environment's default holds
(`INFESTATIONS_READ_FROM_ROLLUP`, app/kernel/config.py). Each process polls the table (one primary-key read at most
every `POLL_SECONDS`, single flight, on the primary: a replica could lag the switch); LISTEN/NOTIFY would not
survive a transaction-pooling PgBouncer. A failed poll keeps the last known values and is retried a poll later.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import DateTime, Text, delete, func, select, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from app.kernel import config, db
from app.kernel.db import Base

log = logging.getLogger(__name__)

READ_FROM_ROLLUP = "infestations.read_from_rollup"

# every flag this code knows, with the default a database without its row gets
DEFAULTS: dict[str, Callable[[], bool]] = {READ_FROM_ROLLUP: config.read_from_rollup_default}

# a change reaches every process within this + one request (the bound is 2 s)
POLL_SECONDS = 1.0


class RuntimeSetting(Base):
    """One operator-set runtime flag (authoritative while the row exists; absent: the environment's default)."""

    __tablename__ = "runtime_settings"

    name: Mapped[str] = mapped_column(Text, primary_key=True)
    value: Mapped[Any] = mapped_column(JSONB, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


_ROWS = select(RuntimeSetting.name, RuntimeSetting.value)

_values: dict[str, Any] = {}
_read_at: float | None = None
_lock: asyncio.Lock | None = None


async def read_from_rollup() -> bool:
    """The rollup read flag as this process knows it (polled at most every POLL_SECONDS)."""
    return await flag(READ_FROM_ROLLUP)


async def flag(name: str) -> bool:
    await _poll()
    value = _values.get(name)
    return DEFAULTS[name]() if value is None else bool(value)


async def _poll() -> None:
    global _read_at, _lock
    if _read_at is not None and time.monotonic() - _read_at < POLL_SECONDS:
        return
    if _lock is None:
        _lock = asyncio.Lock()
    if _lock.locked() and _read_at is not None:
        return  # another request is reading: this one uses the values known a moment ago
    async with _lock:
        if _read_at is not None and time.monotonic() - _read_at < POLL_SECONDS:
            return
        try:
            async with db.read_session(replica=False) as session:
                rows = (await session.execute(_ROWS)).all()
        except Exception as exc:
            log.warning("reading runtime flags failed (keeping the last known values): %s", exc)
        else:
            _values.clear()
            _values.update({row.name: row.value for row in rows})
        _read_at = time.monotonic()


def forget() -> None:
    """The next read polls the database (tests; after `flags set` in this process)."""
    global _read_at, _lock
    _values.clear()
    _read_at = None
    _lock = None


_SHOW = text("SELECT name, value, updated_at FROM runtime_settings ORDER BY name")


async def stored() -> dict[str, tuple[Any, datetime]]:
    """Every settings row: name -> (value, updated_at)."""
    async with db.read_session(replica=False) as session:
        return {row.name: (row.value, row.updated_at) for row in (await session.execute(_SHOW)).all()}


async def set_flag(name: str, value: bool | None, *, actor_id: int | None, notes: str) -> int:
    """Write (`value` True/False) or remove (None) a flag's row, audited in the same transaction; returns the
    audit event's id. The audit event also moves every cache keyed on the newest audit id."""
    from sqlalchemy.dialects.postgresql import insert

    from app.kernel.audit import record_audit

    if name not in DEFAULTS:
        raise KeyError(name)
    async with db.transaction() as session:
        before = (
            await session.execute(select(RuntimeSetting.value).where(RuntimeSetting.name == name).with_for_update())
        ).scalar_one_or_none()
        if value is None:
            await session.execute(delete(RuntimeSetting).where(RuntimeSetting.name == name))
        else:
            upsert = insert(RuntimeSetting).values(name=name, value=value)
            await session.execute(
                upsert.on_conflict_do_update(
                    index_elements=[RuntimeSetting.name],
                    set_={"value": upsert.excluded.value, "updated_at": func.now()},
                )
            )
        event = await record_audit(
            session,
            actor_id=actor_id,
            action="flag.unset" if value is None else "flag.set",
            subject_type="flag",
            subject_id=name,
            before={"value": before},
            after={"value": value},
            reason=None,
            notes=notes,
        )
    forget()
    return int(event.id)
