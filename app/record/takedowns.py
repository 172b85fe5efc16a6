"""What a privileged viewer sees that the public cannot, and the audit event that hid it: the markers of the public
pages (docs/domain.md §8 "The moderator's view"), and the caches keyed by the takedown fence. In the record
because the site reads it and may not import `app.moderation`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Generic, TypeVar

from sqlalchemy import Select, select, tuple_
from sqlalchemy.dialects.postgresql import distinct_on

from app.kernel import db
from app.kernel.audit import AuditEvent
from app.kernel.cache import SingleFlightCache

# The audited action that sets each hidden subject's state, and the field of its `after` that names the state.
TAKEDOWN_ACTIONS: Final = {
    "scan": ("scan.visibility", "visibility"),
    "repository": ("repository.listing", "listing_status"),
    "statement": ("statement.visibility", "visibility"),
}
# What a marker says of each hidden state: a label and what the public does not see (words, not colour alone).
MARK_WORDS: Final = {
    ("scan", "restricted"): ("Restricted", "this report is hidden from the public"),
    ("scan", "public_summary"): ("Summary only", "the public sees this report's header, not its findings"),
    ("repository", "quarantined"): ("Quarantined", "this repository and its reports are hidden from the public"),
    ("repository", "pending"): ("Not listed", "off the atlas, the feeds and the sitemap"),
    ("statement", "hidden"): ("Hidden", "this statement is hidden from the public"),
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
    label: str = ""
    words: str = ""


def _latest(subjects: list[Subject]) -> Select[Any]:
    e = AuditEvent.__table__
    actions = sorted({action for action, _field in TAKEDOWN_ACTIONS.values()})
    # DISTINCT ON walks audit_events_subject_idx: one row per subject, its newest takedown action
    return (
        select(e.c.subject_type, e.c.subject_id, e.c.id, e.c.inserted_at, e.c.after)
        .where(tuple_(e.c.subject_type, e.c.subject_id).in_(subjects), e.c.action.in_(actions))
        .ext(distinct_on(e.c.subject_type, e.c.subject_id))
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
    events = {(row[0], row[1]): row[2:] for row in rows}
    found: dict[Subject, Takedown] = {}
    for subject, state in states.items():
        event_id, at, after = events.get(subject, (None, None, None))
        if (after or {}).get(TAKEDOWN_ACTIONS[subject[0]][1]) != state:
            event_id = at = None
        found[subject] = Takedown(state, event_id, at, *MARK_WORDS[(subject[0], state)])
    return found


@dataclass(frozen=True)
class Marks:
    """The markers of one public page for a privileged viewer; `audit_links` only for moderators (the audit event
    pages are theirs)."""

    repository: Takedown | None
    reports: dict[int, Takedown]
    statements: dict[int, Takedown]
    audit_links: bool


async def page_marks(
    *,
    repository: tuple[str, str] | None = None,
    reports: Iterable[tuple[int, str]] = (),
    statements: Iterable[tuple[int, str]] = (),
    audit_links: bool,
) -> Marks:
    """The markers for a repository (`slug`, listing status), reports and statements (id, visibility): whatever of
    them the public cannot see (a listing other than listed, a report not public, a hidden statement)."""
    hidden: list[tuple[Subject, str]] = []
    if repository is not None and repository[1] != "listed":
        hidden.append((("repository", repository[0]), repository[1]))
    hidden += [(("scan", str(i)), visibility) for i, visibility in reports if visibility != "public"]
    hidden += [(("statement", str(i)), visibility) for i, visibility in statements if visibility == "hidden"]
    found = await takedowns(hidden)
    return Marks(
        repository=found.get(("repository", repository[0])) if repository is not None else None,
        reports={int(k[1]): v for k, v in found.items() if k[0] == "scan"},
        statements={int(k[1]): v for k, v in found.items() if k[0] == "statement"},
        audit_links=audit_links,
    )


V = TypeVar("V")


class TakedownKeyedCache(Generic[V]):
    """A `SingleFlightCache` whose key carries the takedown fence (`db.takedown_fence`, read at every call), so a
    takedown anywhere changes its answers at the next request (docs/scaling.md); anonymous answers only
    (docs/security.md)."""

    def __init__(self, ttl: Callable[[], float], *, maxsize: int) -> None:
        self.cache: SingleFlightCache[V] = SingleFlightCache(ttl, maxsize=maxsize)
        self._seen: int | None = None

    async def get(self, key: Hashable, loader: Callable[[], Awaitable[V]]) -> V:
        async with db.read_session() as session:
            generation = await db.takedown_fence(session)
        if generation != self._seen:
            self.cache.invalidate()
            self._seen = generation
        return await self.cache.get((generation, key), loader)

    def reset(self) -> None:
        self.cache.reset()
        self._seen = None
