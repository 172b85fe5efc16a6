"""Reads of the moderation console: keyset-paginated, capped lists of reports, repositories, accounts and the
audit log. Moderators see every row whatever its visibility or listing (the console is where they undo things)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, FromClause, Select, select

from app.accounts.models import ACCOUNT_STATES, PLATFORM_ROLES, Account
from app.kernel import db, paging
from app.kernel.audit import AuditEvent
from app.kernel.errors import ValidationError
from app.kernel.paging import (
    Page,
    after_keyset,
    cursor_params,
    decode_id_cursor,
    encode_cursor,
    encode_id_cursor,
    keyset_page,
)
from app.moderation.rows import ConsoleAccount, ConsoleAuditEvent, ConsoleReport, ConsoleRepository
from app.registry.models import LISTING_STATUSES, Repository
from app.reports.models import VISIBILITIES, Scan

DEFAULT_LIMIT = 50
MAX_LIMIT = 100
Row = TypeVar("Row", ConsoleReport, ConsoleRepository, ConsoleAccount, ConsoleAuditEvent)
Dated = TypeVar("Dated", ConsoleReport, ConsoleAuditEvent)  # lists keyset on (inserted_at, id)
Numbered = TypeVar("Numbered", ConsoleRepository, ConsoleAccount)  # lists keyset on id


def _by_inserted_at(row: ConsoleReport | ConsoleAuditEvent) -> str:
    return encode_cursor(row.inserted_at, row.id)


def _by_id(row: ConsoleRepository | ConsoleAccount) -> str:
    return encode_id_cursor(row.id)


def clamp_limit(limit: int | None) -> int:
    return paging.clamp_limit(limit, MAX_LIMIT, default=DEFAULT_LIMIT)


def _only(query: Select[Any], column: ColumnElement[Any], value: str | None, allowed: tuple[str, ...]) -> Select[Any]:
    """The rows whose `column` is `value` (all of them when none is given); a 400 naming the column if `value` is
    not one of `allowed`."""
    if value is None or value == "":
        return query
    if value not in allowed:
        raise ValidationError({column.name: [f"must be one of {', '.join(allowed)}"]}, status_code=400)
    return query.where(column == value)


def _id_cursor(cursor: str | None) -> int | None:
    return decode_id_cursor(cursor) if cursor else None


# One select per console noun, shared by its list and its detail read; filters are added per request.
_scans = Scan.__table__.alias("s")
_repositories = Repository.__table__.alias("r")
_accounts = Account.__table__.alias("a")  # also a report's submitter and an event's actor
_events = AuditEvent.__table__.alias("e")


def _columns(table: FromClause, *names: str) -> list[ColumnElement[Any]]:
    return [table.c[name] for name in names]


_REPORTS: Select[Any] = select(
    *_columns(_scans, "id", "commit_sha", "visibility", "review_status", "findings_count", "inserted_at"),
    *_columns(_scans, "moderation_reason", "reviewed_at"),
    *_columns(_repositories, "host", "owner", "name", "listing_status"),
    _accounts.c.handle.label("submitter_handle"),
).select_from(
    _scans.join(_repositories, _repositories.c.id == _scans.c.repository_id).join(
        _accounts, _accounts.c.id == _scans.c.submitted_by_id
    )
)
_REPOSITORIES: Select[Any] = select(
    *_columns(_repositories, "id", "host", "owner", "name", "listing_status", "status", "scan_count"),
    *_columns(_repositories, "open_findings_count", "inserted_at", "forge_redirect", "forge_missing_runs"),
)
_ACCOUNTS: Select[Any] = select(
    *_columns(_accounts, "id", "handle", "platform_role", "trust_tier", "state", "last_seen_at", "inserted_at")
)
_AUDIT_EVENTS: Select[Any] = select(
    *_columns(_events, "id", "action", "subject_type", "subject_id", "before", "after", "reason", "notes"),
    _events.c.inserted_at,
    _accounts.c.handle.label("actor_handle"),
).select_from(_events.outerjoin(_accounts, _accounts.c.id == _events.c.actor_id))


async def _rows(shape: type[Row], statement: Select[Any], params: Mapping[str, object] | None = None) -> list[Row]:
    # the console reads the primary: a moderator must see the change they just made
    async with db.read_session(replica=False) as session:
        return [shape(**row) for row in (await session.execute(statement, params or {})).mappings()]


async def _one(shape: type[Row], statement: Select[Any]) -> Row | None:
    found = await _rows(shape, statement)
    return found[0] if found else None


async def _newest_first(
    shape: type[Dated], query: Select[Any], table: FromClause, *, limit: int, cursor: str | None
) -> Page[Dated]:
    """A page keyset on `(inserted_at DESC, id DESC)`."""
    params = cursor_params(cursor or None)
    if params:
        query = query.where(after_keyset(table.c.inserted_at, table.c.id))
    query = query.order_by(table.c.inserted_at.desc(), table.c.id.desc()).limit(limit + 1)
    return keyset_page(await _rows(shape, query, params), limit, _by_inserted_at)


async def _newest_ids_first(
    shape: type[Numbered], query: Select[Any], table: FromClause, *, limit: int, cursor: str | None
) -> Page[Numbered]:
    """A page keyset on `id DESC`."""
    if (after_id := _id_cursor(cursor)) is not None:
        query = query.where(table.c.id < after_id)
    query = query.order_by(table.c.id.desc()).limit(limit + 1)
    return keyset_page(await _rows(shape, query), limit, _by_id)


async def list_recent_reports(
    *, repository: str | None = None, visibility: str | None = None, limit: int | None = None, cursor: str | None = None
) -> Page[ConsoleReport]:
    """Newest reports first (keyset on inserted_at DESC, id DESC), optionally for one `host/owner/name`."""
    from app.kernel.refs import parse_ref

    query = _only(_REPORTS, _scans.c.visibility, visibility, VISIBILITIES)
    if repository:
        try:
            host, owner, name = parse_ref(repository)
        except ValidationError as exc:
            raise ValidationError(exc.errors, status_code=400) from None
        query = query.where(_repositories.c.host == host, _repositories.c.owner == owner, _repositories.c.name == name)
    return await _newest_first(ConsoleReport, query, _scans, limit=clamp_limit(limit), cursor=cursor)


async def get_report(scan_id: int) -> ConsoleReport | None:
    return await _one(ConsoleReport, _REPORTS.where(_scans.c.id == scan_id))


async def list_repositories(
    *, listing_status: str | None = None, limit: int | None = None, cursor: str | None = None
) -> Page[ConsoleRepository]:
    """Newest repositories first (keyset on id DESC), optionally one listing status."""
    query = _only(_REPOSITORIES, _repositories.c.listing_status, listing_status, LISTING_STATUSES)
    return await _newest_ids_first(ConsoleRepository, query, _repositories, limit=clamp_limit(limit), cursor=cursor)


async def get_repository(host: str, owner: str, name: str) -> ConsoleRepository | None:
    columns = _repositories.c
    return await _one(
        ConsoleRepository,
        _REPOSITORIES.where(columns.host == host.lower(), columns.owner == owner.lower(), columns.name == name.lower()),
    )


async def list_accounts(
    *,
    platform_role: str | None = None,
    state: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> Page[ConsoleAccount]:
    """Newest accounts first (keyset on id DESC), optionally one role and/or state."""
    query = _only(_ACCOUNTS, _accounts.c.platform_role, platform_role, PLATFORM_ROLES)
    query = _only(query, _accounts.c.state, state, ACCOUNT_STATES)
    return await _newest_ids_first(ConsoleAccount, query, _accounts, limit=clamp_limit(limit), cursor=cursor)


async def get_account(handle: str) -> ConsoleAccount | None:
    return await _one(ConsoleAccount, _ACCOUNTS.where(_accounts.c.handle == handle.strip().lower()))


async def list_audit_events(*, limit: int | None = None, cursor: str | None = None) -> Page[ConsoleAuditEvent]:
    """The audit log, newest first (keyset on the (inserted_at DESC, id DESC) index)."""
    return await _newest_first(ConsoleAuditEvent, _AUDIT_EVENTS, _events, limit=clamp_limit(limit), cursor=cursor)


async def get_audit_event(event_id: int) -> ConsoleAuditEvent | None:
    return await _one(ConsoleAuditEvent, _AUDIT_EVENTS.where(_events.c.id == event_id))
