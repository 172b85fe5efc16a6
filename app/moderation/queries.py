"""Reads of the moderation console: keyset-paginated, capped lists of reports, repositories, accounts and the
audit log. Moderators see every row whatever its visibility or listing (the console is where they undo things)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from app.accounts.models import ACCOUNT_STATES, PLATFORM_ROLES
from app.kernel import db, paging
from app.kernel.errors import ValidationError
from app.kernel.paging import Page, after_cursor, decode_id_cursor, encode_id_cursor, keyset_page, time_id_cursor
from app.registry.models import LISTING_STATUSES
from app.reports.models import VISIBILITIES

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


# One select per console noun, shared by its list and its detail read.
_REPORTS = """SELECT s.id, s.commit_sha, s.visibility, s.review_status, s.findings_count, s.inserted_at,
       s.moderation_reason, s.reviewed_at, r.host, r.owner, r.name, r.listing_status, a.handle AS submitter_handle
FROM scans s
JOIN repositories r ON r.id = s.repository_id
JOIN accounts a ON a.id = s.submitted_by_id"""
_REPOSITORIES = """SELECT id, host, owner, name, listing_status, status, scan_count, open_findings_count, inserted_at
FROM repositories"""
_ACCOUNTS = "SELECT id, handle, platform_role, trust_tier, state, last_seen_at, inserted_at FROM accounts"
_AUDIT_EVENTS = """SELECT e.id, e.action, e.subject_type, e.subject_id, e.before, e.after, e.reason, e.notes,
       e.inserted_at, a.handle AS actor_handle
FROM audit_events e LEFT JOIN accounts a ON a.id = e.actor_id"""


async def _rows(sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    # the console reads the primary: a moderator must see the change they just made
    async with db.read_session(replica=False) as session:
        return [dict(row) for row in (await session.execute(text(sql), params)).mappings()]


async def _one(sql: str, params: dict[str, Any]) -> dict[str, Any] | None:
    found = await _rows(sql, params)
    return found[0] if found else None


async def list_recent_reports(
    *, repository: str | None = None, visibility: str | None = None, limit: int | None = None, cursor: str | None = None
) -> Page[dict[str, Any]]:
    """Newest reports first (keyset on inserted_at DESC, id DESC), optionally for one `host/owner/name`."""
    from app.kernel.refs import parse_ref

    limit = clamp_limit(limit)
    visibility = _choice("visibility", visibility, VISIBILITIES)
    params: dict[str, Any] = {"limit": limit + 1, "visibility": visibility}
    where = ["(CAST(:visibility AS text) IS NULL OR s.visibility = :visibility)"]
    if repository:
        try:
            params["host"], params["owner"], params["name"] = parse_ref(repository)
        except ValidationError as exc:
            raise ValidationError(exc.errors, status_code=400) from None
        where.append("r.host = :host AND r.owner = :owner AND r.name = :name")
    after, cursor_params = after_cursor(cursor or None, "(s.inserted_at, s.id)")
    where.append(after)
    params.update(cursor_params)
    sql = f"{_REPORTS}\nWHERE {' AND '.join(where)}\nORDER BY s.inserted_at DESC, s.id DESC LIMIT :limit"
    return keyset_page(await _rows(sql, params), limit, BY_INSERTED_AT)


async def get_report(scan_id: int) -> dict[str, Any] | None:
    return await _one(f"{_REPORTS} WHERE s.id = :id", {"id": scan_id})


async def list_repositories(
    *, listing_status: str | None = None, limit: int | None = None, cursor: str | None = None
) -> Page[dict[str, Any]]:
    """Newest repositories first (keyset on id DESC), optionally one listing status."""
    limit = clamp_limit(limit)
    listing_status = _choice("listing_status", listing_status, LISTING_STATUSES)
    sql = f"""{_REPOSITORIES}
WHERE (CAST(:listing AS text) IS NULL OR listing_status = :listing)
  AND (CAST(:after_id AS bigint) IS NULL OR id < :after_id)
ORDER BY id DESC LIMIT :limit"""
    params = {"listing": listing_status, "after_id": _id_cursor(cursor), "limit": limit + 1}
    return keyset_page(await _rows(sql, params), limit, _by_id)


async def get_repository(host: str, owner: str, name: str) -> dict[str, Any] | None:
    params = {"host": host.lower(), "owner": owner.lower(), "name": name.lower()}
    return await _one(f"{_REPOSITORIES} WHERE host = :host AND owner = :owner AND name = :name", params)


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
    sql = f"""{_ACCOUNTS}
WHERE (CAST(:role AS text) IS NULL OR platform_role = :role)
  AND (CAST(:state AS text) IS NULL OR state = :state)
  AND (CAST(:after_id AS bigint) IS NULL OR id < :after_id)
ORDER BY id DESC LIMIT :limit"""
    params = {"role": platform_role, "state": state, "after_id": _id_cursor(cursor), "limit": limit + 1}
    return keyset_page(await _rows(sql, params), limit, _by_id)


async def get_account(handle: str) -> dict[str, Any] | None:
    return await _one(f"{_ACCOUNTS} WHERE handle = :handle", {"handle": handle.strip().lower()})


async def list_audit_events(*, limit: int | None = None, cursor: str | None = None) -> Page[dict[str, Any]]:
    """The audit log, newest first (keyset on the (inserted_at DESC, id DESC) index)."""
    limit = clamp_limit(limit)
    where, params = after_cursor(cursor or None, "(e.inserted_at, e.id)")
    params["limit"] = limit + 1
    sql = f"{_AUDIT_EVENTS}\nWHERE {where}\nORDER BY e.inserted_at DESC, e.id DESC LIMIT :limit"
    return keyset_page(await _rows(sql, params), limit, BY_INSERTED_AT)


async def get_audit_event(event_id: int) -> dict[str, Any] | None:
    return await _one(f"{_AUDIT_EVENTS} WHERE e.id = :id", {"id": event_id})
