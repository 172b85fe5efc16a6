"""Reads of the moderation console: keyset-paginated, capped lists of reports, repositories, accounts and the
audit log. Moderators see every row whatever its visibility or listing (the console is where they undo things)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Select, select

from app.accounts.models import ACCOUNT_STATES, PLATFORM_ROLES, Account
from app.kernel import db, paging
from app.kernel.audit import AuditEvent
from app.kernel.errors import ValidationError
from app.kernel.paging import (
    Page,
    after_keyset,
    cursor_params,
    decode_id_cursor,
    encode_id_cursor,
    keyset_page,
    time_id_cursor,
)
from app.registry.models import LISTING_STATUSES, Repository
from app.reports.models import VISIBILITIES, Scan

DEFAULT_LIMIT = 50
MAX_LIMIT = 100
BY_INSERTED_AT = time_id_cursor("inserted_at", "id")


def _by_id(row: dict[str, Any]) -> str:
    return encode_id_cursor(row["id"])


def clamp_limit(limit: int | None) -> int:
    return paging.clamp_limit(limit, MAX_LIMIT, default=DEFAULT_LIMIT)


def _choice(field: str, value: str | None, allowed: tuple[str, ...]) -> str | None:
    if value is None or value == "":
        return None
    if value not in allowed:
        raise ValidationError({field: [f"must be one of {', '.join(allowed)}"]}, status_code=400)
    return value


def _id_cursor(cursor: str | None) -> int | None:
    return decode_id_cursor(cursor) if cursor else None


# One select per console noun, shared by its list and its detail read; filters are added per request.
_S, _R, _A = Scan.__table__.alias("s"), Repository.__table__.alias("r"), Account.__table__.alias("a")
_REPORTS: Select[Any] = select(
    _S.c.id,
    _S.c.commit_sha,
    _S.c.visibility,
    _S.c.review_status,
    _S.c.findings_count,
    _S.c.inserted_at,
    _S.c.moderation_reason,
    _S.c.reviewed_at,
    _R.c.host,
    _R.c.owner,
    _R.c.name,
    _R.c.listing_status,
    _A.c.handle.label("submitter_handle"),
).select_from(_S.join(_R, _R.c.id == _S.c.repository_id).join(_A, _A.c.id == _S.c.submitted_by_id))
_REPOSITORIES_T = Repository.__table__
_REPOSITORIES: Select[Any] = select(
    *(
        _REPOSITORIES_T.c[name]
        for name in ("id", "host", "owner", "name", "listing_status", "status", "scan_count", "open_findings_count")
    ),
    _REPOSITORIES_T.c.inserted_at,
)
_ACCOUNTS_T = Account.__table__
_ACCOUNTS: Select[Any] = select(
    *(
        _ACCOUNTS_T.c[name]
        for name in ("id", "handle", "platform_role", "trust_tier", "state", "last_seen_at", "inserted_at")
    )
)
_E, _ACTOR = AuditEvent.__table__.alias("e"), Account.__table__.alias("a")
_AUDIT_EVENTS: Select[Any] = select(
    *(
        _E.c[name]
        for name in ("id", "action", "subject_type", "subject_id", "before", "after", "reason", "notes", "inserted_at")
    ),
    _ACTOR.c.handle.label("actor_handle"),
).select_from(_E.outerjoin(_ACTOR, _ACTOR.c.id == _E.c.actor_id))


async def _rows(statement: Select[Any], params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    # the console reads the primary: a moderator must see the change they just made
    async with db.read_session(replica=False) as session:
        return [dict(row) for row in (await session.execute(statement, params or {})).mappings()]


async def _one(statement: Select[Any]) -> dict[str, Any] | None:
    found = await _rows(statement)
    return found[0] if found else None


def _newest_first(
    query: Select[Any], cursor: str | None, inserted_at: ColumnElement[Any], row_id: ColumnElement[Any]
) -> tuple[Select[Any], dict[str, Any]]:
    params = cursor_params(cursor)
    if params:
        query = query.where(after_keyset(inserted_at, row_id))
    return query.order_by(inserted_at.desc(), row_id.desc()), params


async def list_recent_reports(
    *, repository: str | None = None, visibility: str | None = None, limit: int | None = None, cursor: str | None = None
) -> Page[dict[str, Any]]:
    """Newest reports first (keyset on inserted_at DESC, id DESC), optionally for one `host/owner/name`."""
    from app.kernel.refs import parse_ref

    limit = clamp_limit(limit)
    visibility = _choice("visibility", visibility, VISIBILITIES)
    query = _REPORTS
    if visibility is not None:
        query = query.where(_S.c.visibility == visibility)
    if repository:
        try:
            host, owner, name = parse_ref(repository)
        except ValidationError as exc:
            raise ValidationError(exc.errors, status_code=400) from None
        query = query.where(_R.c.host == host, _R.c.owner == owner, _R.c.name == name)
    query, params = _newest_first(query, cursor or None, _S.c.inserted_at, _S.c.id)
    return keyset_page(await _rows(query.limit(limit + 1), params), limit, BY_INSERTED_AT)


async def get_report(scan_id: int) -> dict[str, Any] | None:
    return await _one(_REPORTS.where(_S.c.id == scan_id))


async def list_repositories(
    *, listing_status: str | None = None, limit: int | None = None, cursor: str | None = None
) -> Page[dict[str, Any]]:
    """Newest repositories first (keyset on id DESC), optionally one listing status."""
    limit = clamp_limit(limit)
    listing_status = _choice("listing_status", listing_status, LISTING_STATUSES)
    query = _REPOSITORIES
    if listing_status is not None:
        query = query.where(_REPOSITORIES_T.c.listing_status == listing_status)
    if (after_id := _id_cursor(cursor)) is not None:
        query = query.where(_REPOSITORIES_T.c.id < after_id)
    query = query.order_by(_REPOSITORIES_T.c.id.desc()).limit(limit + 1)
    return keyset_page(await _rows(query), limit, _by_id)


async def get_repository(host: str, owner: str, name: str) -> dict[str, Any] | None:
    t = _REPOSITORIES_T
    return await _one(
        _REPOSITORIES.where(t.c.host == host.lower(), t.c.owner == owner.lower(), t.c.name == name.lower())
    )


async def list_accounts(
    *,
    platform_role: str | None = None,
    state: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> Page[dict[str, Any]]:
    """Newest accounts first (keyset on id DESC), optionally one role and/or state."""
    limit = clamp_limit(limit)
    platform_role = _choice("platform_role", platform_role, PLATFORM_ROLES)
    state = _choice("state", state, ACCOUNT_STATES)
    query = _ACCOUNTS
    if platform_role is not None:
        query = query.where(_ACCOUNTS_T.c.platform_role == platform_role)
    if state is not None:
        query = query.where(_ACCOUNTS_T.c.state == state)
    if (after_id := _id_cursor(cursor)) is not None:
        query = query.where(_ACCOUNTS_T.c.id < after_id)
    query = query.order_by(_ACCOUNTS_T.c.id.desc()).limit(limit + 1)
    return keyset_page(await _rows(query), limit, _by_id)


async def get_account(handle: str) -> dict[str, Any] | None:
    return await _one(_ACCOUNTS.where(_ACCOUNTS_T.c.handle == handle.strip().lower()))


async def list_audit_events(*, limit: int | None = None, cursor: str | None = None) -> Page[dict[str, Any]]:
    """The audit log, newest first (keyset on the (inserted_at DESC, id DESC) index)."""
    limit = clamp_limit(limit)
    query, params = _newest_first(_AUDIT_EVENTS, cursor or None, _E.c.inserted_at, _E.c.id)
    return keyset_page(await _rows(query.limit(limit + 1), params), limit, BY_INSERTED_AT)


async def get_audit_event(event_id: int) -> dict[str, Any] | None:
    return await _one(_AUDIT_EVENTS.where(_E.c.id == event_id))
