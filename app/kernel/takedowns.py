"""What a privileged viewer sees that the public cannot, and the audit event that hid it: the markers of the public
pages (docs/domain.md §8 "The moderator's view"). In the kernel because the site reads it and may not import
`app.moderation`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from sqlalchemy import Select, select, tuple_

from app.kernel import db
from app.kernel.audit import AuditEvent

# The audited action that sets each hidden subject's state, and the field of its `after` that names the state.
TAKEDOWN_ACTIONS: Final = {
    "scan": ("scan.visibility", "visibility"),
    "repository": ("repository.listing", "listing_status"),
    "statement": ("statement.visibility", "visibility"),
}
MARKS_PER_PAGE_MAX: Final = 500  # subjects of one page (20 reports, 50 statements, a repository): a wide bound

Subject = tuple[str, str]  # (audit subject_type, subject_id): ("scan", "42"), ("repository", "host/owner/name")


@dataclass(frozen=True)
class Takedown:
    """A hidden subject as a marker shows it: its state, and the audit event that set it (None when none did, e.g.
    rows written outside the moderation service)."""

    state: str
    event_id: int | None
    at: datetime | None


def _latest(subjects: list[Subject]) -> Select[Any]:
    e = AuditEvent.__table__
    actions = sorted({action for action, _field in TAKEDOWN_ACTIONS.values()})
    # DISTINCT ON walks audit_events_subject_idx: one row per subject, its newest takedown action
    return (
        select(e.c.subject_type, e.c.subject_id, e.c.id, e.c.inserted_at, e.c.after)
        .where(tuple_(e.c.subject_type, e.c.subject_id).in_(subjects), e.c.action.in_(actions))
        .distinct(e.c.subject_type, e.c.subject_id)
        .order_by(e.c.subject_type, e.c.subject_id, e.c.inserted_at.desc(), e.c.id.desc())
    )


async def takedowns(hidden: Iterable[tuple[Subject, str]]) -> dict[Subject, Takedown]:
    """Each hidden subject (with its current state) and the newest audit event that set that state, in one query for
    the whole page. An event that set another state (the row was changed since without an audit) is not its cause."""
    states = dict(list(hidden)[:MARKS_PER_PAGE_MAX])
    if not states:
        return {}
    async with db.read_session(replica=False) as session:  # privileged views read the primary
        rows = (await session.execute(_latest(sorted(states)))).all()
    found: dict[Subject, Takedown] = {subject: Takedown(state, None, None) for subject, state in states.items()}
    for subject_type, subject_id, event_id, at, after in rows:
        subject = (subject_type, subject_id)
        field = TAKEDOWN_ACTIONS[subject_type][1]
        if (after or {}).get(field) == states[subject]:
            found[subject] = Takedown(states[subject], int(event_id), at)
    return found
