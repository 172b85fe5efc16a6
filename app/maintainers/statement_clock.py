"""What a maintainer's statement does to a coordinated-disclosure clock (docs/domain.md "Coordinated disclosure"):
a statement on an embargoed finding announces nothing until publication, and a `fixed` one moves its deadline to
FIXED_GRACE after the statement when that is sooner, audited on the clock (subject: the canonical's id)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import BigInteger, ColumnElement, exists, literal, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.kernel import db
from app.kernel.audit import record_audit
from app.reports.models import Disclosure

DISCLOSURE_SUBJECT = "disclosure"
FIXED_ACTION = "disclosure.fixed"
FIXED_GRACE = timedelta(days=7)


def embargo_of(canonical_id: ColumnElement[Any]) -> ColumnElement[bool]:
    """The canonical is under a coordinated-disclosure embargo now."""
    return exists().where(Disclosure.canonical_finding_id == canonical_id, Disclosure.state == "embargoed")


async def embargoed(session: AsyncSession, canonical_id: int) -> bool:
    return bool((await session.execute(select(embargo_of(literal(canonical_id, BigInteger))))).scalar())


# the clock, locked, and a `fixed` statement's move of it (sooner, never later): the change in whole days (<= 0)
# is appended to `extensions` so the stub shows it; a maintainer's "extend once" counts only days > 0
_CLOCK = text("SELECT deadline FROM disclosures WHERE canonical_finding_id = :id AND state = 'embargoed' FOR UPDATE")
_FIXED = text("""
UPDATE disclosures SET deadline = :deadline, extensions = extensions || CAST(:entry AS jsonb), updated_at = now()
WHERE canonical_finding_id = :id
""")


async def lock_clock(session: AsyncSession, canonical_id: int) -> datetime | None:
    """The embargoed canonical's deadline, its clock locked (before the canonical's row: the order a publication
    takes them in), or None when its embargo ended meanwhile."""
    deadline: datetime | None = (await session.execute(_CLOCK, {"id": canonical_id})).scalar_one_or_none()
    return deadline


async def fixed_moves_deadline(
    session: AsyncSession, canonical_id: int, deadline: datetime | None, account_id: int
) -> None:
    """A `fixed` statement on an embargoed finding: its deadline becomes FIXED_GRACE from now when that is sooner,
    audited (a person's change to a clock: the purge hook names its pages)."""
    now = db.utcnow()
    moved = now + FIXED_GRACE
    if deadline is None or moved >= deadline:
        return
    days = -round((deadline - moved) / timedelta(days=1))
    entry = {"by": "maintainer", "days": days, "reason": "fixed", "at": now.isoformat()}
    await session.execute(_FIXED, {"id": canonical_id, "deadline": moved, "entry": json.dumps([entry])})
    await record_audit(
        session,
        actor_id=account_id,
        action=FIXED_ACTION,
        subject_type=DISCLOSURE_SUBJECT,
        subject_id=str(canonical_id),
        before={"deadline": deadline.isoformat()},
        after={"deadline": moved.isoformat(), "extended_days": days},
        reason="fixed",
        notes=None,
    )
