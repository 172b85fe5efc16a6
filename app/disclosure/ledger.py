"""What the public sees of coordinated disclosure (docs/domain.md "Coordinated disclosure"): the stub on a
repository's page and twin, and the ledger `/disclosures` (+ `.json`) of every open embargo by deadline, then the
last 30 days' publications with how each ended. Both name a finding only by its severity and its dates: never its
title, file, line, description, pattern or id, and never the reporter.

A clock shows here only when the public may know a report of it exists: the repository is listed, and the canonical
has an occurrence in a public, published report that is either public itself or held by the embargo (a report held
for its evidence, held for low signal, or restricted shows nothing)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any
from urllib.parse import urlencode

from msgspec import Meta
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from app.kernel import db
from app.kernel.answers import Answer, Timestamp
from app.kernel.errors import ValidationError
from app.kernel.paging import InvalidCursor, decode_cursor, encode_cursor
from app.kernel.refs import REF_FORMAT, parse_ref
from app.kernel.shared_cache import repository_tag
from app.kernel.sql import Fragment, Slot, statement
from app.kernel.text import ascii_int
from app.kernel.urls import twin_path
from app.kernel.web import View, json_twin, page
from app.record.public import listed_repository
from app.record.rendered import page_route
from app.reports.embargo import DISCLOSURE_FRAGMENT, DisclosureAnswer, DisclosureExtension, disclosure_answer
from app.reports.types import Severity

LEDGER_PAGE = 50  # rows of a ledger page unless `limit` asks otherwise
LEDGER_MAX = 200
PUBLISHED_DAYS = 30  # how long a publication stays on the ledger
STUB_MAX = 100  # clocks listed on a repository's stub (the count says how many there are)
# how a clock ended, in words (the JSON's `published_because`)
BECAUSE_WORDS = {
    "deadline": "its deadline passed",
    "fixed": "fixed: 7 days after the maintainers' statement",
    "maintainer": "its maintainers published it",
    "moderator": "a moderator published it",
    "reporter": "its reporter published it",
}

# the canonical `d.canonical_finding_id` has an occurrence the public may know of (see the module's docstring)
_KNOWN = Fragment("""EXISTS (
  SELECT 1 FROM scan_findings kf JOIN scans ks ON ks.id = kf.scan_id
  WHERE kf.canonical_finding_id = d.canonical_finding_id
    AND ks.visibility = 'public' AND ks.published_at IS NOT NULL
    AND (kf.published_at IS NOT NULL OR kf.held_reason = 'embargo'))""")
_COLUMNS = DISCLOSURE_FRAGMENT
_REPOSITORY = Fragment("(CAST(:host AS text) IS NULL OR (r.host = :host AND r.owner = :owner AND r.name = :name))")

# a clock with its repository and finding; the slots every statement below fills (the public filter: listed, known)
_CLOCKS = Fragment("""disclosures d
JOIN repositories r ON r.id = d.repository_id
JOIN canonical_findings c ON c.id = d.canonical_finding_id""")
_SLOTS: dict[str, Slot] = {"clocks": _CLOCKS, "columns": _COLUMNS, "listed": listed_repository(), "known": _KNOWN}

# open clocks, soonest deadline first (the partial index on deadline), after the cursor's row
_OPEN = statement(
    """
SELECT d.canonical_finding_id AS id, d.deadline AS keyset_at, r.id AS repository_id, r.host, r.owner, r.name,
       c.severity, {columns}
FROM {clocks}
WHERE d.state = 'embargoed' AND {listed} AND {known} AND {repository}
  AND (CAST(:after_at AS timestamptz) IS NULL
       OR (d.deadline, d.canonical_finding_id) > (CAST(:after_at AS timestamptz), CAST(:after_id AS bigint)))
ORDER BY d.deadline, d.canonical_finding_id
LIMIT :fetch
""",
    **_SLOTS,
    repository=_REPOSITORY,
)

# the last 30 days' publications, newest first, after the cursor's row
_PUBLISHED = statement(
    """
SELECT d.canonical_finding_id AS id, d.published_at AS keyset_at, r.id AS repository_id, r.host, r.owner, r.name,
       c.severity, {columns}
FROM {clocks}
WHERE d.state = 'published' AND d.published_at > now() - make_interval(days => :days)
  AND {listed} AND {known} AND {repository}
  AND (CAST(:after_at AS timestamptz) IS NULL
       OR (d.published_at, d.canonical_finding_id) < (CAST(:after_at AS timestamptz), CAST(:after_id AS bigint)))
ORDER BY d.published_at DESC, d.canonical_finding_id DESC
LIMIT :fetch
""",
    **_SLOTS,
    repository=_REPOSITORY,
)

# a repository's open clocks for its stub, soonest deadline first, with how many there are in all
_STUB = statement(
    """
SELECT c.severity, count(*) OVER () AS embargoed, {columns}
FROM {clocks}
WHERE d.repository_id = :repository_id AND d.state = 'embargoed' AND {listed} AND {known}
ORDER BY d.deadline, d.canonical_finding_id
LIMIT :limit
""",
    **_SLOTS,
)

_OF_CANONICAL = statement("SELECT {columns} FROM disclosures d WHERE d.canonical_finding_id = :id", columns=_COLUMNS)


# ---- answers ------------------------------------------------------------------------------------------------------


class DisclosureStub(Answer):
    """One finding under coordinated disclosure, as the public sees it before publication."""

    severity: Severity | None
    reported_at: Timestamp | None
    deadline: Timestamp | None
    extensions: list[DisclosureExtension]


class RepositoryDisclosures(Answer):
    """The stub on a repository's record: how many of its findings are under coordinated disclosure, and each one's
    severity, dates and extensions (soonest deadline first, at most 100)."""

    embargoed: int
    items: list[DisclosureStub]


class LedgerItem(Answer):
    repository: Annotated[str, Meta(description="HOST/OWNER/NAME")]
    severity: Severity | None
    reported_at: Timestamp | None
    deadline: Timestamp | None
    state: Annotated[str, Meta(description="embargoed, or published (then `published_because` says how it ended)")]
    extensions: list[DisclosureExtension]
    published_at: Timestamp | None
    published_because: str | None


class DisclosureLedger(Answer):
    """`/disclosures.json`: open embargoes by deadline, then the last 30 days' publications, newest first."""

    items: list[LedgerItem]
    next_cursor: Annotated[str | None, Meta(description="pass as `cursor` for the next page; null on the last")]


def html_time(value: str) -> str:
    """An answer's ISO 8601 time as HTML's `<time datetime>` takes it (at most milliseconds)."""
    return datetime.fromisoformat(value).isoformat(timespec="milliseconds")


def _stub(row: Any) -> DisclosureStub:
    clock = disclosure_answer(row._asdict())
    return DisclosureStub(
        severity=row.severity, reported_at=clock.reported_at, deadline=clock.deadline, extensions=clock.extensions
    )


def _item(row: Any) -> LedgerItem:
    clock = disclosure_answer(row._mapping)
    return LedgerItem(
        repository=f"{row.host}/{row.owner}/{row.name}",
        severity=row.severity,
        reported_at=clock.reported_at,
        deadline=clock.deadline,
        state=clock.state,
        extensions=clock.extensions,
        published_at=clock.published_at,
        published_because=clock.published_because,
    )


# ---- reads other pages use ----------------------------------------------------------------------------------------


async def repository_disclosures(repository_id: int) -> RepositoryDisclosures:
    """The stub of a repository (none open: `embargoed` 0, no items)."""
    async with db.reader() as read:
        rows = await read.rows(_STUB, {"repository_id": repository_id, "limit": STUB_MAX})
    return RepositoryDisclosures(embargoed=int(rows[0].embargoed) if rows else 0, items=[_stub(r) for r in rows])


async def finding_disclosure(canonical_id: int | None) -> DisclosureAnswer:
    """A canonical finding's `disclosure` object (`immediate` when it never had a clock)."""
    if canonical_id is None:
        return disclosure_answer(None)
    async with db.reader() as read:
        found = await read.maps(_OF_CANONICAL, {"id": canonical_id})
    return disclosure_answer(found[0] if found else None)


# ---- the ledger ---------------------------------------------------------------------------------------------------

_OPEN_SEGMENT, _PUBLISHED_SEGMENT = "o", "p"


@dataclass(frozen=True, slots=True)
class LedgerQuery:
    """The ledger's address, parsed once: the repository filter, where the page starts, and its length."""

    repository: tuple[str, str, str] | None
    segment: str  # o: still in the open clocks; p: in the publications
    after: tuple[datetime, int] | None
    limit: int
    raw_repository: str | None = None

    def query_string(self, cursor: str | None = None) -> str:
        params = {"repository": self.raw_repository, "limit": str(self.limit) if self.limit != LEDGER_PAGE else None}
        return urlencode({k: v for k, v in {**params, "cursor": cursor}.items() if v})


def _cursor(segment: str, at: datetime, row_id: int) -> str:
    return segment + encode_cursor(at, row_id)


def parse_ledger(request: Request, rollup: bool) -> LedgerQuery:
    """`repository` (HOST/OWNER/NAME), `cursor` (one this ledger issued) and `limit` (1..200): each malformed one
    is a 422 naming it."""
    q = request.query_params
    raw_repository = q.get("repository") or None
    repository = None
    if raw_repository is not None:
        try:
            repository = parse_ref(raw_repository)
        except ValidationError:
            raise ValidationError({"repository": [f"must be {REF_FORMAT}"]}) from None
    raw_limit = q.get("limit")
    limit = LEDGER_PAGE if raw_limit is None else ascii_int(raw_limit)
    if limit is None or not 1 <= limit <= LEDGER_MAX:
        raise ValidationError({"limit": [f"must be an integer from 1 to {LEDGER_MAX}"]})
    segment, after = _OPEN_SEGMENT, None
    raw_cursor = q.get("cursor")
    if raw_cursor is not None:
        if raw_cursor[:1] not in (_OPEN_SEGMENT, _PUBLISHED_SEGMENT):
            raise ValidationError({"cursor": ["is not a cursor this ledger issued"]})
        try:
            after = decode_cursor(raw_cursor[1:])
        except InvalidCursor:
            raise ValidationError({"cursor": ["is not a cursor this ledger issued"]}) from None
        segment = raw_cursor[0]
    return LedgerQuery(repository, segment, after, limit, raw_repository)


@dataclass(frozen=True, slots=True)
class LedgerData:
    rows: list[Any]
    next_cursor: str | None

    def tags(self) -> list[str]:
        return sorted({repository_tag(int(r.repository_id)) for r in self.rows})


async def read_ledger(view: View[LedgerQuery]) -> LedgerData:
    """One page: the open clocks from the cursor, then (when they run out) the publications; one extra row read
    tells whether a next page exists."""
    asked = view.query
    host, owner, name = asked.repository or (None, None, None)
    base = {"host": host, "owner": owner, "name": name, "days": PUBLISHED_DAYS}
    rows: list[Any] = []
    async with db.read_session() as session:
        if asked.segment == _OPEN_SEGMENT:
            after_at, after_id = asked.after or (None, None)
            params = {**base, "after_at": after_at, "after_id": after_id, "fetch": asked.limit + 1}
            rows = [(_OPEN_SEGMENT, r) for r in (await session.execute(_OPEN, params)).all()]
        if len(rows) <= asked.limit:
            after_at, after_id = asked.after if asked.segment == _PUBLISHED_SEGMENT and asked.after else (None, None)
            params = {**base, "after_at": after_at, "after_id": after_id, "fetch": asked.limit + 1 - len(rows)}
            rows += [(_PUBLISHED_SEGMENT, r) for r in (await session.execute(_PUBLISHED, params)).all()]
    next_cursor = None
    if len(rows) > asked.limit:
        del rows[asked.limit :]
        segment, last = rows[-1]
        next_cursor = _cursor(segment, last.keyset_at, int(last.id))
    return LedgerData([r for _, r in rows], next_cursor)


def render_ledger(view: View[LedgerQuery], data: LedgerData) -> Response:
    items = [_item(r) for r in data.rows]
    if view.as_json:
        return json_twin(DisclosureLedger(items=items, next_cursor=data.next_cursor), tags=data.tags())
    asked = view.query
    here = view.request.scope["query_string"].decode("latin-1")
    json_url = twin_path("/disclosures" + (f"?{here}" if here else ""))
    next_url = f"/disclosures?{asked.query_string(data.next_cursor)}" if data.next_cursor else None
    context = {
        "items": items,
        "repository": asked.raw_repository or "",
        "next_url": next_url,
        "published_days": PUBLISHED_DAYS,
        "because_words": BECAUSE_WORDS,
        "html_time": html_time,
        "first_page": asked.after is None,
    }
    return page(view.request, "disclosure/ledger.html", context, json_url=json_url, tags=data.tags())


routes: list[BaseRoute] = [
    page_route(
        "/disclosures{format:format}", parse=parse_ledger, read=read_ledger, render=render_ledger, name="disclosures"
    )
]
