"""Maintainers' statements: the only writer of `finding_statements` and of the feed's `finding.statement` entries,
under the canonical's row lock (docs/domain.md §14 "Statements", §13 "Change feed")."""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import BigInteger, ColumnElement, func, insert, literal, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.accounts.models import Account
from app.kernel import db, ratelimit
from app.kernel.actors import require_good_standing
from app.kernel.errors import Forbidden, NotFound, ValidationError
from app.kernel.intake import Budget
from app.kernel.purge import purge_after_commit
from app.kernel.shared_cache import repository_tag
from app.kernel.text import optional_text
from app.maintainers.access import maintains
from app.maintainers.models import (
    STATEMENT_VISIBILITIES,
    VEX_JUSTIFICATIONS,
    VEX_STATUSES,
    FindingStatement,
)
from app.maintainers.statement_clock import embargo_of, embargoed, fixed_moves_deadline, lock_clock
from app.maintainers.statement_queries import SHOWN, StatementView, current_of, statement_by_id
from app.record.models import FINDING_STATEMENT, Change, PublishedRepository
from app.record.outbox import ring_webhooks_after_commit
from app.record.public import LISTED, PUBLIC, has_public_occurrence
from app.registry.models import Repository
from app.reports.held import LOW_SIGNAL, release_held
from app.reports.models import CanonicalFinding, Scan, ScanFinding
from app.reports.secrets_scanner import SCAN_BUDGET_SECONDS, scan_fields

MAX_TEXT = 2000  # impact_statement, action_statement (characters, after trimming)
HIDDEN = "hidden"
AUDIT_SUBJECT = "statement"  # audit events of a statement: subject_type, and its id as subject_id
VISIBILITY_ACTION = "statement.visibility"
HIDE_REASON = "moderation"  # the reason a hide's feed entry carries (a withdrawal of the statement)
FINDING_NOT_FOUND = {"finding": ["not found"]}
_SHA = re.compile(r"[0-9a-f]{40}")
# every statement is a feed entry and a webhook delivery per subscriber: a flood from one account is refused
STATEMENTS_PER_MINUTE = 20
STATEMENTS = ratelimit.Window(
    "statements", STATEMENTS_PER_MINUTE, 60, "at most {limit} statements a minute per account"
)


async def take_allowance(account_id: int) -> None:
    """Count one statement against the account's minute (429 with Retry-After past STATEMENTS_PER_MINUTE)."""
    await ratelimit.take(STATEMENTS, f"account:{account_id}")


@dataclass(frozen=True)
class StatementInput:
    """A statement body as validated (OpenVEX's rules hold)."""

    status: str
    justification: str | None = None
    impact_statement: str | None = None
    action_statement: str | None = None
    fixed_in: str | None = None


# --- the body: validated and scanned off the event loop --------------------------------------------------------


def _choice(body: Mapping[str, Any], field: str, values: tuple[str, ...], errors: dict[str, list[str]]) -> str | None:
    value = body.get(field)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or value not in values:
        errors[field] = [f"must be one of {', '.join(values)}"]
        return None
    return value


def _commit(body: Mapping[str, Any], field: str, errors: dict[str, list[str]]) -> str | None:
    value = body.get(field)
    if value is None or value == "":
        return None
    sha = value.strip().lower() if isinstance(value, str) else None
    if sha is None or not _SHA.fullmatch(sha):
        errors[field] = ["must be a commit sha: 40 hexadecimal characters"]
        return None
    return sha


def validate_statement(body: Mapping[str, Any]) -> StatementInput:
    """`{status, justification, impact_statement, action_statement, fixed_in}` under OpenVEX's rules, each refusal
    naming its field: `not_affected` needs a justification (one of five) or an impact statement, which only
    `not_affected` takes; `affected` needs an action statement; `fixed_in` (a 40-hex commit) only with `fixed`.
    Texts are trimmed, at most MAX_TEXT characters, without control characters. Other keys are ignored."""
    errors: dict[str, list[str]] = {}
    status = body.get("status")
    if status is None:
        errors["status"] = ["is required"]
    elif status == "":
        errors["status"] = ["can't be blank"]
    elif not isinstance(status, str) or status not in VEX_STATUSES:
        errors["status"] = [f"must be one of {', '.join(VEX_STATUSES)}"]
    justification = _choice(body, "justification", VEX_JUSTIFICATIONS, errors)
    impact = optional_text(body, "impact_statement", MAX_TEXT, errors, trim=True)
    action = optional_text(body, "action_statement", MAX_TEXT, errors, trim=True)
    fixed_in = _commit(body, "fixed_in", errors)
    if "status" not in errors:
        if status == "not_affected":
            if justification is None and impact is None and not errors.keys() & {"justification", "impact_statement"}:
                errors["justification"] = [
                    "not_affected needs a justification (one of "
                    + ", ".join(VEX_JUSTIFICATIONS)
                    + ") or an impact_statement saying why the code is not affected"
                ]
        else:
            for field, value in (("justification", justification), ("impact_statement", impact)):
                if value is not None:
                    errors[field] = [f"is only for status not_affected (this statement is {status})"]
        if status == "affected" and action is None and "action_statement" not in errors:
            errors["action_statement"] = ["affected needs an action_statement: what users should do about it"]
        if fixed_in is not None and status != "fixed":
            errors["fixed_in"] = [f"is only for status fixed (this statement is {status})"]
    if errors:
        raise ValidationError(errors)
    assert isinstance(status, str)
    return StatementInput(status, justification, impact, action, fixed_in)


def prepare_statement(body: Mapping[str, Any], budget: Budget) -> StatementInput:
    """A statement body validated, then its texts scanned for secrets like a report's (on an intake thread)."""
    statement = validate_statement(body)
    budget.check()
    scan_fields(
        {"impact_statement": statement.impact_statement, "action_statement": statement.action_statement},
        budget=min(SCAN_BUDGET_SECONDS, budget.remaining()),
    )
    return statement


# --- writing -----------------------------------------------------------------------------------------------------


def parse_public_id(raw: str) -> uuid.UUID:
    """A canonical finding's public id from a path or the command line (NotFound when it is not one)."""
    try:
        return uuid.UUID(str(raw))
    except ValueError:
        raise NotFound(FINDING_NOT_FOUND) from None


async def _announce(
    session: AsyncSession,
    canonical_id: int,
    repository_id: int,
    statement: tuple[int, str] | None,
    *,
    reason: str | None,
) -> None:
    """One `finding.statement` entry naming the canonical's current statement (`(id, status)`, or None when it has
    none), numbered at commit like every entry (`app.record.changes`). `repository_id` and the opaque id route it
    (webhooks); what it shows is decided at read time. None while the canonical is embargoed: nothing public moves
    until publication, which announces its current statement then (app/reports/embargo.py)."""
    if await embargoed(session, canonical_id):
        return
    await session.execute(
        insert(Change).values(
            kind=FINDING_STATEMENT,
            canonical=select(CanonicalFinding.public_id).where(CanonicalFinding.id == canonical_id).scalar_subquery(),
            repository_id=repository_id,
            repository_key=select(PublishedRepository.opaque_id)
            .where(PublishedRepository.repository_id == repository_id)
            .scalar_subquery(),
            statement_id=None if statement is None else statement[0],
            status=None if statement is None else statement[1],
            reason=reason,
        )
    )
    ring_webhooks_after_commit()  # the repository's webhooks get the entry (docs/domain.md "Webhooks")


async def _current(session: AsyncSession, canonical_id: int) -> tuple[int, str] | None:
    """The canonical's current statement `(id, status)` as this transaction sees it, or None."""
    current_sql = select(FindingStatement.id, FindingStatement.status).where(
        current_of(literal(canonical_id, BigInteger))
    )
    current = (await session.execute(current_sql)).first()
    return None if current is None else (int(current[0]), str(current[1]))


async def _lock_canonical(session: AsyncSession, canonical_id: int) -> None:
    """The canonical finding's row lock orders its statements and their visibility changes (and so their feed
    entries) one after another."""
    await session.execute(select(CanonicalFinding.id).where(CanonicalFinding.id == canonical_id).with_for_update())


def held_for_review(canonical_id: ColumnElement[Any]) -> ColumnElement[bool]:
    """The canonical has an occurrence of a public report held for review (its reporter's signal is low): its
    repository's maintainers may state on it, and that statement releases it (docs/domain.md "Earned trust")."""
    return (
        select(ScanFinding.id)
        .join(Scan, Scan.id == ScanFinding.scan_id)
        .where(
            ScanFinding.canonical_finding_id == canonical_id,
            ScanFinding.held_reason == LOW_SIGNAL,
            ScanFinding.published_at.is_(None),
            Scan.visibility == PUBLIC,
        )
        .exists()
    )


async def record_statement(account_id: int, canonical_public_id: str, statement: StatementInput) -> StatementView:
    """Record a maintainer's statement on a public canonical finding, and its feed entry, in one transaction.
    404 for an unknown or non-public finding (before anything about the account), 403 for an account that does not
    maintain the finding's repository now or is not in good standing. A finding held for review is a 404 to all
    but its repository's maintainers, whose statement releases it (and any held occurrence of a public one). So is
    an embargoed one: its maintainers' statements on it announce nothing until publication, and a `fixed` one moves
    its deadline to FIXED_GRACE later when that is sooner."""
    public_id = parse_public_id(canonical_public_id)
    async with db.transaction() as session:
        public = has_public_occurrence(CanonicalFinding.id.expression)
        found = (
            await session.execute(
                select(
                    CanonicalFinding.id,
                    CanonicalFinding.repository_id,
                    public.label("public"),
                    embargo_of(CanonicalFinding.id.expression).label("embargoed"),
                )
                .join(Repository, Repository.id == CanonicalFinding.repository_id)
                .where(
                    CanonicalFinding.public_id == public_id,
                    Repository.listing_status == LISTED,
                    or_(
                        public,
                        held_for_review(CanonicalFinding.id.expression),
                        embargo_of(CanonicalFinding.id.expression),
                    ),
                )
            )
        ).first()
        if found is None:
            raise NotFound(FINDING_NOT_FOUND)
        canonical_id, repository_id = int(found[0]), int(found[1])
        account = (await session.execute(select(Account).where(Account.id == account_id))).scalar_one_or_none()
        maintainer = await maintains(session, repository_id, account_id, lock=True)
        if account is None or not maintainer:
            if not found.public:  # a held finding is not shown to whoever is not its repository's maintainer
                raise NotFound(FINDING_NOT_FOUND)
            raise Forbidden({"account": ["only a verified maintainer of this finding's repository may state on it"]})
        require_good_standing(account)
        deadline = await lock_clock(session, canonical_id) if found.embargoed else None
        await _lock_canonical(session, canonical_id)
        # a maintainer's statement releases what was held for low signal (published first: its feed entry precedes)
        await release_held(session, canonical_ids=[canonical_id])
        statement_id = (
            await session.execute(
                insert(FindingStatement)
                .values(
                    canonical_finding_id=canonical_id,
                    author_id=account_id,
                    **asdict(statement),  # status, justification, impact, action, fixed_in: the body as validated
                    # taken after the lock: the newest statement is also the last one to commit
                    inserted_at=func.clock_timestamp(),
                )
                .returning(FindingStatement.id)
            )
        ).scalar_one()
        await _announce(session, canonical_id, repository_id, (statement_id, statement.status), reason=None)
        if statement.status == "fixed":
            await fixed_moves_deadline(session, canonical_id, deadline, account_id)
        # the shared cache: the finding's and repository's pages show the new statement at the next request
        purge_after_commit({repository_tag(repository_id)})
    view = await statement_by_id(statement_id)
    assert view is not None
    return view


@dataclass(frozen=True)
class VisibilityChange:
    """What a moderator's hide or show of a statement changed (its audit event's subject and values)."""

    statement_id: int
    before: dict[str, Any]
    after: dict[str, Any]


async def change_visibility(
    session: AsyncSession, statement_id: int, visibility: str, *, actor_id: int
) -> VisibilityChange:
    """Hide or show one statement in the caller's (audited) transaction, with its feed entry naming the finding's
    current statement afterwards; a hide's entry carries the reason `moderation`. A moderator may not moderate a
    statement they wrote; setting the visibility it has is refused."""
    if visibility not in STATEMENT_VISIBILITIES:
        raise ValidationError({"visibility": [f"must be one of {', '.join(STATEMENT_VISIBILITIES)}"]})
    found = (
        await session.execute(
            select(FindingStatement.canonical_finding_id, CanonicalFinding.repository_id)
            .join(CanonicalFinding, CanonicalFinding.id == FindingStatement.canonical_finding_id)
            .where(FindingStatement.id == statement_id)
        )
    ).first()
    if found is None:
        raise NotFound({"statement": [f"no statement with id {statement_id}"]})
    canonical_id, repository_id = int(found[0]), int(found[1])
    await _lock_canonical(session, canonical_id)
    row = (
        await session.execute(select(FindingStatement).where(FindingStatement.id == statement_id).with_for_update())
    ).scalar_one()
    if row.author_id == actor_id:
        raise Forbidden({"base": ["you cannot moderate a statement you wrote"]})
    if row.visibility == visibility:
        raise ValidationError({"visibility": [f"is already {visibility}"]})
    before = {"visibility": row.visibility}
    row.visibility = visibility
    await session.flush()
    current = await _current(session, canonical_id)
    await _announce(session, canonical_id, repository_id, current, reason=HIDE_REASON if visibility == HIDDEN else None)
    return VisibilityChange(statement_id, before, {"visibility": visibility})


@dataclass(frozen=True)
class HiddenStatements:
    """What hiding one author's statements changed: the statements hidden (ids, ascending) and the repositories whose
    findings they were on."""

    statement_ids: list[int]
    repository_ids: list[int]


async def hide_statements_by(session: AsyncSession, author_id: int, *, actor_id: int | None) -> HiddenStatements:
    """Hide every shown statement `author_id` wrote, in the caller's (audited) transaction, as a moderator's hide
    does one by one: under each canonical's row lock (canonical id order: a stable lock order), one feed entry per
    canonical naming its current statement afterwards, with the reason `moderation` (the bulk export rebuilds), and
    each repository's pages purged after the commit. A moderator may not hide their own (`actor_id`; None: the
    account's lock did it)."""
    if actor_id is not None and actor_id == author_id:
        raise Forbidden({"base": ["you cannot moderate statements you wrote"]})
    found = (
        await session.execute(
            select(FindingStatement.canonical_finding_id, CanonicalFinding.repository_id)
            .join(CanonicalFinding, CanonicalFinding.id == FindingStatement.canonical_finding_id)
            .where(FindingStatement.author_id == author_id, FindingStatement.visibility == SHOWN)
            .distinct()
            .order_by(FindingStatement.canonical_finding_id)
        )
    ).all()
    hidden: list[int] = []
    repositories: set[int] = set()
    for canonical_id, repository_id in ((int(row[0]), int(row[1])) for row in found):
        await _lock_canonical(session, canonical_id)
        ids = (
            (
                await session.execute(
                    update(FindingStatement)
                    .where(
                        FindingStatement.canonical_finding_id == canonical_id,
                        FindingStatement.author_id == author_id,
                        FindingStatement.visibility == SHOWN,
                    )
                    .values(visibility=HIDDEN)
                    .returning(FindingStatement.id)
                )
            )
            .scalars()
            .all()
        )
        if not ids:
            continue  # hidden meanwhile by a moderator (the lock orders us after them)
        hidden += ids
        repositories.add(repository_id)
        await _announce(session, canonical_id, repository_id, await _current(session, canonical_id), reason=HIDE_REASON)
    if repositories:
        purge_after_commit({repository_tag(r) for r in repositories})
    return HiddenStatements(sorted(hidden), sorted(repositories))


__all__ = [
    "AUDIT_SUBJECT",
    "HIDDEN",
    "MAX_TEXT",
    "SHOWN",
    "VISIBILITY_ACTION",
    "HiddenStatements",
    "StatementInput",
    "VisibilityChange",
    "change_visibility",
    "held_for_review",
    "hide_statements_by",
    "prepare_statement",
    "record_statement",
    "take_allowance",
    "validate_statement",
]
