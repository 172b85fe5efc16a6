"""A moderator's changes to a coordinated-disclosure clock (docs/domain.md "Coordinated disclosure"): publish at once
(for example, exploited in the wild) or extend (no once or 30-day limit, never past reported_at + 120 days), by form
with reason and notes, each one audited action; and the console's list of open embargoes, soonest deadline first."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.accounts.models import Account
from app.disclosure import actions
from app.kernel import db
from app.kernel.errors import ValidationError
from app.kernel.paging import Page, cursor_params, encode_cursor, keyset_page
from app.kernel.refs import parse_ref
from app.kernel.text import ascii_int
from app.maintainers.statement_clock import DISCLOSURE_SUBJECT
from app.maintainers.statements import parse_public_id
from app.moderation.queries import clamp_limit
from app.moderation.rows import ClockSubject, OpenEmbargo
from app.moderation.service import ActionOutcome, Change, act, validate_reason_notes
from app.reports.embargo import DisclosureExtension

# open embargoes by deadline (the clock's own index), optionally one repository's; keyset on (deadline, canonical id)
_OPEN = text("""
SELECT c.public_id, c.severity, c.title, r.host, r.owner, r.name, d.reported_at, d.deadline, d.extensions,
       d.canonical_finding_id, d.state,
       (SELECT f.public_id FROM scan_findings f WHERE f.canonical_finding_id = c.id ORDER BY f.id LIMIT 1)
         AS occurrence
FROM disclosures d
JOIN canonical_findings c ON c.id = d.canonical_finding_id
JOIN repositories r ON r.id = d.repository_id
WHERE d.state = 'embargoed'
  AND (CAST(:host AS text) IS NULL OR (r.host = :host AND r.owner = :owner AND r.name = :name))
  AND (CAST(:cursor_at AS timestamptz) IS NULL
       OR (d.deadline, d.canonical_finding_id) > (CAST(:cursor_at AS timestamptz), CAST(:cursor_id AS bigint)))
ORDER BY d.deadline, d.canonical_finding_id
LIMIT :limit
""")


def _cursor_of(row: OpenEmbargo) -> str:
    return encode_cursor(row.deadline, row.canonical_finding_id)


async def open_embargoes(*, repository: str | None, cursor: str | None) -> Page[OpenEmbargo]:
    """Open embargoes, soonest deadline first (a 400 naming `repository` for a malformed `host/owner/name`)."""
    host = owner = name = None
    if repository:
        try:
            host, owner, name = parse_ref(repository)
        except ValidationError as exc:
            raise ValidationError(exc.errors, status_code=400) from None
    params = cursor_params(cursor) or {"cursor_at": None, "cursor_id": None}
    limit = clamp_limit(None)
    async with db.read_session(replica=False) as session:  # the console reads the primary
        result = await session.execute(
            _OPEN, {**params, "host": host, "owner": owner, "name": name, "limit": limit + 1}
        )
        rows = [
            OpenEmbargo(**{**row, "extensions": [DisclosureExtension(**e) for e in row["extensions"] or []]})
            for row in result.mappings()
        ]
    return keyset_page(rows, limit, _cursor_of)


async def extend(actor: Account, canonical_public_id: str, days: str | None, reason: str, notes: str) -> ActionOutcome:
    """Move the deadline `days` whole days later (422 naming `days`; within reported_at + 120 days), the moderator's
    reason shown on the stub with the extension."""
    errors: dict[str, list[str]] = {}
    reason_t, notes_t = validate_reason_notes(reason, notes, errors)
    wanted = ascii_int(days or "")
    if wanted is None or wanted < 1:
        errors["days"] = ["must be a whole number of days, at least 1"]
    public_id = parse_public_id(canonical_public_id)

    async def step(session: AsyncSession, actor: Account) -> Change:
        assert wanted is not None
        found, (_answer, before, after) = await actions.moderator_extend(
            session, public_id, actions.Extension(wanted, reason_t)
        )
        return Change(DISCLOSURE_SUBJECT, str(found.canonical_id), before, after)

    return await act(actor.id, actions.EXTEND_ACTION, step, errors=errors, reason=reason_t, notes=notes_t)


async def publish(actor: Account, canonical_public_id: str, reason: str, notes: str) -> ActionOutcome:
    """End the embargo now and publish the finding everywhere (`published_because: moderator`)."""
    errors: dict[str, list[str]] = {}
    reason_t, notes_t = validate_reason_notes(reason, notes, errors)
    public_id = parse_public_id(canonical_public_id)

    async def step(session: AsyncSession, actor: Account) -> Change:
        found, (_answer, before, after) = await actions.moderator_publish(session, public_id)
        return Change(DISCLOSURE_SUBJECT, str(found.canonical_id), before, after)

    return await act(actor.id, actions.PUBLISH_ACTION, step, errors=errors, reason=reason_t, notes=notes_t)


async def subject(canonical_public_id: str) -> ClockSubject | None:
    """What a form about one clock shows (None: no open or closed clock for that finding)."""
    public_id = parse_public_id(canonical_public_id)
    async with db.read_session(replica=False) as session:
        row = (await session.execute(_SUBJECT, {"public_id": public_id})).mappings().first()
    return None if row is None else ClockSubject(**row)


_SUBJECT = text("""
SELECT c.public_id, c.severity, c.title, r.host, r.owner, r.name, d.state, d.reported_at, d.deadline,
       d.canonical_finding_id
FROM disclosures d
JOIN canonical_findings c ON c.id = d.canonical_finding_id
JOIN repositories r ON r.id = d.repository_id
WHERE c.public_id = :public_id
""")


_OCCURRENCE = text("SELECT public_id FROM scan_findings WHERE canonical_finding_id = :id ORDER BY id LIMIT 1")


async def occurrence_of(canonical_id: int) -> str | None:
    """An occurrence of the canonical (its page: where an audit event about its clock is seen), or None."""
    async with db.read_session(replica=False) as session:
        found = (await session.execute(_OCCURRENCE, {"id": canonical_id})).scalar_one_or_none()
    return None if found is None else str(found)
