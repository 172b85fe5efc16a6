"""Reads of maintainers' statements: a finding's current one (its newest `shown`: a hide holds at the next request),
a finding's statements for moderators, a repository's current ones (docs/domain.md §14)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ARRAY, BigInteger, ColumnElement, Select, Text, Uuid, and_, any_, bindparam, cast, func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from app.accounts.models import Account
from app.kernel import db
from app.kernel.audit import AuditEvent
from app.kernel.sql import compiled
from app.maintainers.models import FindingStatement
from app.record.changes import next_seq_of
from app.record.models import FINDING_STATEMENT, Change
from app.record.public import (
    has_public_occurrence,
    listed_repository,
    public_scan,
    published_occurrence,
    repositories,
    scan_findings,
    scans,
)
from app.reports.models import CanonicalFinding, ScanFinding

SHOWN = "shown"
STATEMENTS_PER_FINDING_MAX = 50  # what a moderator sees of one finding's history
REPOSITORY_STATEMENTS_MAX = 5000  # one per public canonical: the OpenVEX document's bound (as findings.sarif's)


@dataclass(frozen=True)
class StatementView:
    """One statement as every surface shows it (`author`: the maintainer's handle; None once the account is gone)."""

    id: int
    canonical: str  # the canonical finding's public id
    status: str
    justification: str | None
    impact_statement: str | None
    action_statement: str | None
    fixed_in: str | None
    author: str | None
    at: datetime
    visibility: str = SHOWN


_COLUMNS = (
    FindingStatement.id,
    CanonicalFinding.public_id,
    FindingStatement.status,
    FindingStatement.justification,
    FindingStatement.impact_statement,
    FindingStatement.action_statement,
    FindingStatement.fixed_in,
    Account.handle,
    FindingStatement.inserted_at,
    FindingStatement.visibility,
)


def view_of(row: Any) -> StatementView:
    return StatementView(
        id=int(row[0]),
        canonical=str(row[1]),
        status=str(row[2]),
        justification=row[3],
        impact_statement=row[4],
        action_statement=row[5],
        fixed_in=row[6],
        author=row[7],
        at=row[8],
        visibility=str(row[9]),
    )


def _statements(*columns: ColumnElement[Any]) -> Select[*tuple[Any, ...]]:
    """Statements with their canonical and author: `_COLUMNS`, or these columns in their place."""
    return (
        select(*(columns or _COLUMNS))
        .select_from(FindingStatement)
        .join(CanonicalFinding, CanonicalFinding.id == FindingStatement.canonical_finding_id)
        .outerjoin(Account, Account.id == FindingStatement.author_id)
    )


def current_of(canonical_id: ColumnElement[Any]) -> ColumnElement[bool]:
    """`finding_statements.id` is the current statement of `canonical_id`: the newest shown one (one index probe)."""
    newest = aliased(FindingStatement)
    return FindingStatement.id == (
        select(newest.id)
        .where(newest.canonical_finding_id == canonical_id, newest.visibility == SHOWN)
        .order_by(newest.inserted_at.desc(), newest.id.desc())
        .limit(1)
        .correlate_except(newest)
        .scalar_subquery()
    )


async def statement_by_id(statement_id: int, *, replica: bool = False) -> StatementView | None:
    """One statement, whatever its visibility (the API's answer, the moderation form)."""
    async with db.read_session(replica=replica) as session:
        row = (await session.execute(_statements().where(FindingStatement.id == statement_id))).first()
    return None if row is None else view_of(row)


def _current_by_canonical_ids() -> Select[*tuple[Any, ...]]:
    return (
        _statements()
        .add_columns(FindingStatement.canonical_finding_id)
        .where(
            FindingStatement.canonical_finding_id == any_(bindparam("ids", type_=ARRAY(BigInteger))),
            current_of(FindingStatement.canonical_finding_id.expression),
        )
    )


def _current_by_occurrences() -> Select[*tuple[Any, ...]]:
    return (
        _statements()
        .add_columns(ScanFinding.public_id)
        .join(ScanFinding, ScanFinding.canonical_finding_id == CanonicalFinding.id)
        .where(
            ScanFinding.public_id == any_(bindparam("ids", type_=ARRAY(Uuid))),
            current_of(CanonicalFinding.id.expression),
        )
    )


STATEMENT_COLUMNS = tuple(f"statement_{n}" for n in range(len(_COLUMNS)))


def current_statement_row(canonical_id: ColumnElement[Any]) -> Select[*tuple[Any, ...]]:
    """The current statement of `canonical_id` (a column of an enclosing statement: a LATERAL beside a page's own
    row), its columns named `STATEMENT_COLUMNS` (`view_of` reads them in order)."""
    labelled = (column.label(name) for column, name in zip(_COLUMNS, STATEMENT_COLUMNS, strict=True))
    return _statements(*labelled).where(FindingStatement.canonical_finding_id == canonical_id, current_of(canonical_id))


def statement_in(row: dict[str, Any]) -> StatementView | None:
    """The statement `current_statement_row` added to `row` (its columns taken out), None when it has none."""
    values = [row.pop(name) for name in STATEMENT_COLUMNS]
    return None if values[0] is None else view_of(values)


# compiled once: building the statement was a third of a finding page's CPU when the render cache misses (issue 39)
_CURRENT_BY_CANONICAL_IDS = compiled(_current_by_canonical_ids())
_CURRENT_BY_OCCURRENCES = compiled(_current_by_occurrences())


async def current_by_canonical_ids(canonical_ids: Iterable[int]) -> dict[int, StatementView]:
    """The current statement of each of these canonical findings that has one, by canonical id."""
    ids = sorted(set(canonical_ids))
    if not ids:
        return {}
    async with db.reader() as read:
        rows = await read.rows(_CURRENT_BY_CANONICAL_IDS, {"ids": ids})
    return {int(row[-1]): view_of(row) for row in rows}


async def current_statement(canonical_id: int) -> StatementView | None:
    return (await current_by_canonical_ids([canonical_id])).get(canonical_id)


async def current_by_occurrences(read: db.Reader, public_ids: Iterable[uuid.UUID | str]) -> dict[str, StatementView]:
    """The current statement of each occurrence's canonical finding, by the occurrence's public id (text), on the
    page's open read."""
    ids = sorted({str(i) for i in public_ids})
    if not ids:
        return {}
    rows = await read.rows(_CURRENT_BY_OCCURRENCES, {"ids": [uuid.UUID(i) for i in ids]})
    return {str(row[-1]): view_of(row) for row in rows}


async def statements_of(canonical_id: int) -> list[StatementView]:
    """A finding's statements, newest first, hidden ones included (moderators only)."""
    query = (
        _statements()
        .where(FindingStatement.canonical_finding_id == canonical_id)
        .order_by(FindingStatement.inserted_at.desc(), FindingStatement.id.desc())
        .limit(STATEMENTS_PER_FINDING_MAX)
    )
    async with db.read_session(replica=False) as session:
        return [view_of(row) for row in (await session.execute(query)).all()]


@dataclass(frozen=True)
class FindingStatementRow:
    """A public canonical finding of a repository with its current statement, and its newest public occurrence
    (the finding's page)."""

    canonical_id: int
    title: str
    occurrence: str  # the newest public occurrence's public id
    statement: StatementView


async def repository_statements(
    repository_id: int, *, limit: int = REPOSITORY_STATEMENTS_MAX, newest_first: bool = False
) -> list[FindingStatementRow]:
    """The current statements of a listed repository's public canonical findings, oldest canonical first (or newest
    statement first): the rows of its OpenVEX document and the statement entries of its Atom feed. Empty for a
    repository that is not listed."""
    r = repositories.alias("sr")
    f, s = scan_findings.alias("sf"), scans.alias("ss")
    newest_public = (
        select(f.c.public_id)
        .select_from(f.join(s, s.c.id == f.c.scan_id))
        .where(f.c.canonical_finding_id == CanonicalFinding.id, published_occurrence(f), public_scan(s))
        .order_by(f.c.id.desc())
        .limit(1)
        .correlate_except(f, s)
        .scalar_subquery()
    )
    query = (
        _statements()
        .add_columns(CanonicalFinding.id, CanonicalFinding.title, newest_public)
        .join(r, r.c.id == CanonicalFinding.repository_id)
        .where(
            CanonicalFinding.repository_id == repository_id,
            and_(listed_repository(r), has_public_occurrence(CanonicalFinding.id.expression)),
            current_of(CanonicalFinding.id.expression),
        )
        .order_by(
            *(
                (FindingStatement.inserted_at.desc(), FindingStatement.id.desc())
                if newest_first
                else (CanonicalFinding.id,)
            )
        )
        .limit(limit)
    )
    async with db.read_session() as session:
        rows = (await session.execute(query)).all()
    return [FindingStatementRow(int(row[-3]), str(row[-2]), str(row[-1]), view_of(row)) for row in rows]


async def statement_events(repository_id: int) -> tuple[int, datetime | None]:
    """How many statement events the repository has had (statements recorded on its findings, plus moderators'
    visibility changes of them) and when the newest happened: the OpenVEX document's `version` and `last_updated`."""
    of_repository = (
        select(FindingStatement.id)
        .join(CanonicalFinding, CanonicalFinding.id == FindingStatement.canonical_finding_id)
        .where(CanonicalFinding.repository_id == repository_id)
    )
    recorded = select(func.count(), func.max(FindingStatement.inserted_at)).where(
        FindingStatement.id.in_(of_repository)
    )
    # audit subjects are text: `statement` and the statement's id (app.maintainers.statements.AUDIT_SUBJECT)
    subjects = of_repository.with_only_columns(cast(FindingStatement.id, Text))
    moderated = select(func.count(), func.max(AuditEvent.inserted_at)).where(
        AuditEvent.subject_type == "statement", AuditEvent.subject_id.in_(subjects)
    )
    async with db.read_session() as session:
        count_a, newest_a = (await session.execute(recorded)).one()
        count_b, newest_b = (await session.execute(moderated)).one()
    times = [t for t in (newest_a, newest_b) if t is not None]
    return int(count_a) + int(count_b), max(times) if times else None


@dataclass(frozen=True)
class ModeratedStatement(StatementView):
    """A statement as the moderation form shows it, with the newest occurrence of its finding (None: none left)."""

    occurrence: str | None = None


async def moderation_subject(statement_id: int) -> ModeratedStatement | None:
    """A statement as the moderation form shows it: the statement's fields, and the newest occurrence of its finding
    (whatever its report's visibility: moderators see all), whose page the form returns to."""
    newest = (
        select(ScanFinding.public_id)
        .where(ScanFinding.canonical_finding_id == CanonicalFinding.id)
        .order_by(ScanFinding.id.desc())
        .limit(1)
        .correlate(CanonicalFinding)
        .scalar_subquery()
    )
    async with db.read_session(replica=False) as session:
        row = (
            await session.execute(_statements().add_columns(newest).where(FindingStatement.id == statement_id))
        ).first()
    if row is None:
        return None
    return ModeratedStatement(**vars(view_of(row)), occurrence=None if row[-1] is None else str(row[-1]))


async def statement_hides_after(session: AsyncSession, cursor: str) -> bool:
    """Whether a moderator hid a statement at or after the change-feed `cursor` (a hide's `finding.statement` entry
    carries a reason): an export older than that may hold the hidden statement and must be rebuilt. Read in seq
    order from the cursor (the entries since one export, at most about a day of them)."""
    hides = select(Change.id).where(
        Change.seq >= next_seq_of(cursor), Change.kind == FINDING_STATEMENT, Change.reason.is_not(None)
    )
    return bool((await session.execute(select(hides.exists()))).scalar())
