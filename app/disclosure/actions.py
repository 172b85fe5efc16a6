"""The people who may change a coordinated-disclosure clock (docs/domain.md "Coordinated disclosure"): a verified
maintainer extends it once (1-30 days, with a reason, after stating `affected` or `under_investigation`) or publishes
at once; the reporter of the finding's first report publishes early only when the repository has no window of its
own; a moderator publishes at once or extends, by form with reason and notes (app/moderation). Each change is one
transaction with its audit event (subject `disclosure`, the canonical's id: the purge hook names its pages), and every
publication goes through `publish_embargoed` (the settle path: feed, dirty keys, metrics, webhooks, purge). A
maintainer's `fixed` statement moves the deadline in app/maintainers/statement_clock.py."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any, ClassVar, NamedTuple

from msgspec import Meta, Struct
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from app.accounts.models import Account
from app.accounts.service import ApiCaller, bearer_caller, refused_subject, require_scope
from app.kernel import db
from app.kernel.actors import require_good_standing
from app.kernel.answers import Answer, answer_response, iso
from app.kernel.audit import record_audit
from app.kernel.errors import Forbidden, NotFound, ValidationError
from app.kernel.intake import Body, Budget, body_route, json_object
from app.kernel.sql import statement
from app.kernel.text import optional_text
from app.maintainers.access import maintains
from app.maintainers.routes import MAINTAIN_SCOPE, parse_empty
from app.maintainers.statement_clock import DISCLOSURE_SUBJECT
from app.maintainers.statements import parse_public_id
from app.record.public import LISTED
from app.reports.embargo import (
    DISCLOSURE_FRAGMENT,
    MAX_DAYS,
    DisclosureAnswer,
    DisclosureExtension,
    disclosure_answer,
    publish_embargoed,
)
from app.reports.policy import SUBMIT_SCOPES
from app.reports.secrets_scanner import SCAN_BUDGET_SECONDS, scan_fields

EXTEND_ACTION = "disclosure.extend"
PUBLISH_ACTION = "disclosure.publish"
MAINTAINER_MAX_DAYS = 30  # one extension by a maintainer, at most this long
LONGEST_DAYS = MAX_DAYS + MAINTAINER_MAX_DAYS  # no deadline beyond reported_at + 120 days, whoever extends
REASON_MIN, REASON_MAX = 3, 300  # a maintainer's reason, shown on the public stub (one line)
EXTEND_AFTER = ("affected", "under_investigation")  # the current statement a maintainer extends after
MAX_BODY_BYTES = 4096  # {"days", "reason"}
NOT_EMBARGOED = "is not embargoed: there is no clock to change"
FINDING_NOT_FOUND = {"finding": ["not found"]}
PUBLISH_SCOPES = (MAINTAIN_SCOPE, *sorted(SUBMIT_SCOPES))  # a maintainer's token, or the reporter's

# the finding, its repository's window and listing (no lock: the clock's row is locked next)
_FINDING = text("""
SELECT c.id, c.repository_id, r.disclosure_days, r.listing_status, r.host || '/' || r.owner || '/' || r.name AS slug
FROM canonical_findings c JOIN repositories r ON r.id = c.repository_id
WHERE c.public_id = :public_id
""")
# the clock, locked: changes to one clock (and the worker's publication) happen one after another
_CLOCK = text("""
SELECT state, reported_at, deadline, extensions FROM disclosures WHERE canonical_finding_id = :id FOR UPDATE
""")
_EXTEND = statement(
    """
UPDATE disclosures d SET deadline = :deadline, extensions = d.extensions || CAST(:entry AS jsonb), updated_at = now()
WHERE d.canonical_finding_id = :id AND d.state = 'embargoed'
RETURNING {columns}
""",
    columns=DISCLOSURE_FRAGMENT,
)
_READ = statement("SELECT {columns} FROM disclosures d WHERE d.canonical_finding_id = :id", columns=DISCLOSURE_FRAGMENT)
# the canonical's current statement (its newest shown one), as every surface names it
_CURRENT_STATUS = text("""
SELECT status FROM finding_statements WHERE canonical_finding_id = :id AND visibility = 'shown'
ORDER BY inserted_at DESC, id DESC LIMIT 1
""")
# who submitted the canonical's first report (the one that opened its clock, or the first one linked to it)
_FIRST_REPORTER = text("""
SELECT s.submitted_by_id FROM scan_findings f JOIN scans s ON s.id = f.scan_id
WHERE f.canonical_finding_id = :id ORDER BY s.inserted_at, s.id LIMIT 1
""")


@dataclass(frozen=True)
class Extension:
    """An extension as asked: whole days and a reason (trimmed)."""

    days: int
    reason: str


@dataclass(frozen=True)
class Found:
    canonical_id: int
    repository_id: int
    repository_days: int
    slug: str


@dataclass(frozen=True)
class Clock:
    state: str
    reported_at: datetime
    deadline: datetime
    extensions: list[DisclosureExtension]

    def extended_by_maintainer(self) -> bool:
        """A maintainer's extension counts once; a `fixed` statement's move (days <= 0) is not one."""
        return any(e.by == "maintainer" and e.days > 0 for e in self.extensions)

    def room_days(self) -> int:
        """Whole days the deadline may still move later (reported_at + LONGEST_DAYS at most)."""
        room = self.reported_at + timedelta(days=LONGEST_DAYS) - self.deadline
        return max(0, math.floor(room / timedelta(days=1)))


class ClockEdit(NamedTuple):
    """What a change did to the clock: the finding's `disclosure` object afterwards, and the audit event's before
    and after values (open JSON: each action its own keys)."""

    disclosure: DisclosureAnswer
    before: dict[str, Any]
    after: dict[str, Any]


class DisclosureChanged(Answer):
    """The finding's clock after the change (the `disclosure` object every twin carries)."""

    disclosure: DisclosureAnswer


class ExtensionRequest(Struct, kw_only=True):
    """A maintainer's one extension: 1-30 whole days and why (shown on the public stub). Allowed once, after the
    finding's current statement is `affected` or `under_investigation`; the deadline never passes reported_at + 120
    days."""

    EXAMPLES: ClassVar[list[dict[str, Any]]] = [
        {"days": 14, "reason": "The fix needs a release of the two downstream packages that vendor this parser."}
    ]

    days: Annotated[int, Meta(ge=1, le=MAINTAINER_MAX_DAYS)]
    reason: Annotated[str, Meta(min_length=REASON_MIN, max_length=REASON_MAX)]


# --- the body ------------------------------------------------------------------------------------------------------


def validate_extension(body: Mapping[str, Any], *, max_days: int | None = MAINTAINER_MAX_DAYS) -> Extension:
    """`{days, reason}`: days a whole number 1..max_days (None: no upper bound but the 120 days'), reason 3..300
    characters on one line; each refusal names its field."""
    errors: dict[str, list[str]] = {}
    days = body.get("days")
    if days is None or days == "":
        errors["days"] = ["is required: the whole days to add to the deadline"]
    elif isinstance(days, bool) or not isinstance(days, int):
        errors["days"] = ["must be a whole number of days"]
    elif days < 1 or (max_days is not None and days > max_days):
        errors["days"] = [f"must be 1 to {max_days}" if max_days is not None else "must be at least 1"]
    reason = optional_text(body, "reason", REASON_MAX, errors, trim=True, single_line=True)
    if reason is None and "reason" not in errors:
        errors["reason"] = ["is required: why the deadline moves (shown on the public stub)"]
    elif reason is not None and len(reason) < REASON_MIN:
        errors["reason"] = [f"must be {REASON_MIN} to {REASON_MAX} characters"]
    if errors:
        raise ValidationError(errors)
    assert isinstance(days, int) and reason is not None
    return Extension(days, reason)


def parse_extension(body: Body, budget: Budget) -> Extension:
    """The extension body validated, its reason scanned for secrets like a statement's (it is public)."""
    extension = validate_extension(json_object(body, budget))
    budget.check()
    scan_fields({"reason": extension.reason}, budget=min(SCAN_BUDGET_SECONDS, budget.remaining()))
    return extension


# --- the changes ---------------------------------------------------------------------------------------------------


async def _found(session: AsyncSession, canonical_public_id: str | uuid.UUID, *, listed_only: bool) -> Found:
    public_id = (
        canonical_public_id if isinstance(canonical_public_id, uuid.UUID) else parse_public_id(canonical_public_id)
    )
    row = (await session.execute(_FINDING, {"public_id": public_id})).first()
    if row is None or (listed_only and row.listing_status != LISTED):
        raise NotFound(FINDING_NOT_FOUND)
    return Found(int(row.id), int(row.repository_id), int(row.disclosure_days), str(row.slug))


async def _clock(session: AsyncSession, canonical_id: int) -> Clock | None:
    """The canonical's clock, locked (before any row a publication locks: the order the clock's worker takes)."""
    row = (await session.execute(_CLOCK, {"id": canonical_id})).first()
    if row is None:
        return None
    extensions = [DisclosureExtension(**e) for e in row.extensions or []]
    return Clock(str(row.state), row.reported_at, row.deadline, extensions)


def _embargoed(clock: Clock | None) -> Clock:
    if clock is None or clock.state != "embargoed":
        raise ValidationError({"disclosure": [NOT_EMBARGOED]})
    return clock


async def _extend(session: AsyncSession, found: Found, clock: Clock, *, by: str, extension: Extension) -> ClockEdit:
    """Move the deadline `extension.days` later and append the entry the stub shows; 422 naming `days` past the
    longest deadline (reported_at + 120 days)."""
    room = clock.room_days()
    if room < 1:
        raise ValidationError({"disclosure": [f"is at its latest deadline ({LONGEST_DAYS} days after the report)"]})
    if extension.days > room:
        raise ValidationError(
            {"days": [f"must be at most {room}: the deadline may not pass {LONGEST_DAYS} days after the report"]}
        )
    deadline = clock.deadline + timedelta(days=extension.days)
    entry = {"by": by, "days": extension.days, "reason": extension.reason, "at": iso(db.utcnow())}
    row = (
        await session.execute(_EXTEND, {"id": found.canonical_id, "deadline": deadline, "entry": json.dumps([entry])})
    ).one()
    before = {"deadline": iso(clock.deadline)}
    after = {"deadline": iso(deadline), "extended_days": extension.days}
    return ClockEdit(disclosure_answer(dict(row._mapping)), before, after)


async def _publish(session: AsyncSession, found: Found, because: str) -> ClockEdit:
    await publish_embargoed(session, [found.canonical_id], because)
    row = (await session.execute(_READ, {"id": found.canonical_id})).one()
    return ClockEdit(
        disclosure_answer(dict(row._mapping)),
        {"state": "embargoed"},
        {"state": "published", "published_because": because},
    )


async def _audited(
    session: AsyncSession,
    found: Found,
    action: str,
    changed: ClockEdit,
    *,
    actor_id: int,
    reason: str | None,
    notes: str | None,
) -> DisclosureAnswer:
    """`changed` recorded as its audit event; the finding's `disclosure` object afterwards."""
    answer, before, after = changed
    await record_audit(
        session,
        actor_id=actor_id,
        action=action,
        subject_type=DISCLOSURE_SUBJECT,
        subject_id=str(found.canonical_id),
        before=before,
        after=after,
        reason=reason,
        notes=notes,
    )
    return answer


async def maintainer_extend(account: Account, canonical_public_id: str, extension: Extension) -> DisclosureAnswer:
    """A verified maintainer's one extension (403 for anyone else; 422 naming `disclosure` when the finding is not
    embargoed, was extended by a maintainer already, or has no current `affected`/`under_investigation`
    statement)."""
    async with db.transaction() as session:
        found = await _found(session, canonical_public_id, listed_only=True)
        if not await maintains(session, found.repository_id, account.id, lock=True):
            raise Forbidden(
                {"account": ["only a verified maintainer of this finding's repository may extend its clock"]}
            )
        require_good_standing(account)
        clock = _embargoed(await _clock(session, found.canonical_id))
        if clock.extended_by_maintainer():
            raise ValidationError({"disclosure": ["was extended by a maintainer already: a maintainer extends once"]})
        status = (await session.execute(_CURRENT_STATUS, {"id": found.canonical_id})).scalar_one_or_none()
        if status not in EXTEND_AFTER:
            raise ValidationError(
                {
                    "disclosure": [
                        "state first: a maintainer extends only after stating affected or under_investigation"
                        + (f" (the current statement is {status})" if status else " (there is no statement yet)")
                    ]
                }
            )
        changed = await _extend(session, found, clock, by="maintainer", extension=extension)
        return await _audited(
            session, found, EXTEND_ACTION, changed, actor_id=account.id, reason=extension.reason, notes=None
        )


async def person_publish(account: Account, canonical_public_id: str) -> DisclosureAnswer:
    """Publish at once: a verified maintainer (`maintainer`), or the reporter of the finding's first report when
    the repository has no window of its own (`reporter`); 403 for anyone else, 422 naming `disclosure` when the
    finding is not embargoed."""
    async with db.transaction() as session:
        found = await _found(session, canonical_public_id, listed_only=True)
        if await maintains(session, found.repository_id, account.id, lock=True):
            because = "maintainer"
        else:
            reporter = (await session.execute(_FIRST_REPORTER, {"id": found.canonical_id})).scalar_one_or_none()
            if reporter != account.id:
                raise Forbidden(
                    {
                        "account": [
                            "only a verified maintainer of this finding's repository, or its reporter, may publish it"
                        ]
                    }
                )
            if found.repository_days > 0:
                raise Forbidden(
                    {
                        "account": [
                            f"the repository has a window of its own ({found.repository_days} days): only its "
                            "maintainers or a moderator may publish early"
                        ]
                    }
                )
            because = "reporter"
        require_good_standing(account)
        _embargoed(await _clock(session, found.canonical_id))
        changed = await _publish(session, found, because)
        return await _audited(session, found, PUBLISH_ACTION, changed, actor_id=account.id, reason=because, notes=None)


async def moderator_extend(
    session: AsyncSession, canonical_public_id: str | uuid.UUID, extension: Extension
) -> tuple[Found, ClockEdit]:
    """A moderator's extension, in the moderation action's (audited) transaction: no once or 30-day limit, but
    never past reported_at + 120 days."""
    found = await _found(session, canonical_public_id, listed_only=False)
    clock = _embargoed(await _clock(session, found.canonical_id))
    return found, await _extend(session, found, clock, by="moderator", extension=extension)


async def moderator_publish(session: AsyncSession, canonical_public_id: str | uuid.UUID) -> tuple[Found, ClockEdit]:
    """A moderator's publication at once (`moderator`), in the moderation action's (audited) transaction."""
    found = await _found(session, canonical_public_id, listed_only=False)
    _embargoed(await _clock(session, found.canonical_id))
    return found, await _publish(session, found, "moderator")


# --- the API -------------------------------------------------------------------------------------------------------


async def _extender(request: Request) -> ApiCaller:
    caller = await bearer_caller(request.headers.get("authorization"))
    require_scope(caller.scopes, MAINTAIN_SCOPE)
    return caller


async def _publisher(request: Request) -> ApiCaller:
    caller = await bearer_caller(request.headers.get("authorization"))
    require_scope(caller.scopes, *PUBLISH_SCOPES)
    return caller


async def extend(request: Request, caller: ApiCaller, extension: Extension) -> Response:
    disclosure = await maintainer_extend(caller.account, request.path_params["canonical_public_id"], extension)
    return answer_response(DisclosureChanged(disclosure=disclosure))


async def publish(request: Request, caller: ApiCaller, _: None) -> Response:
    disclosure = await person_publish(caller.account, request.path_params["canonical_public_id"])
    return answer_response(DisclosureChanged(disclosure=disclosure))


routes: list[BaseRoute] = [
    body_route(
        "/api/v1/findings/{canonical_public_id}/disclosure/extend",
        extend,
        authenticate=_extender,
        parse=parse_extension,
        allowance=refused_subject,
        limit=MAX_BODY_BYTES,
    ),
    body_route(
        "/api/v1/findings/{canonical_public_id}/disclosure/publish",
        publish,
        authenticate=_publisher,
        parse=parse_empty,
        allowance=refused_subject,
        limit=1024,
    ),
]
