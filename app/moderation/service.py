"""Moderation actions (domain §8): the only writer of moderation changes, shared by the HTML console and the CLI.

Each action is one transaction that locks its subject row (`FOR UPDATE`), checks the actor's authority,
validates, applies the change, keeps the repository metrics and the infestation rollups right (dirty keys in the
same transaction) and writes exactly one `AuditEvent` with the before → after values. After the commit it rings
the rollup worker and drops the cached registry stats. A change to the value already held is refused (422
"is already X") so the audit log holds changes only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.accounts.models import ACCOUNT_STATES, PLATFORM_ROLES, Account
from app.accounts.sessions import revoke_account_sessions
from app.infestations.hooks import mark_repository_dirty, mark_scan_dirty, schedule_refresh_after_commit
from app.kernel import db
from app.kernel.errors import Forbidden, NotFound, ValidationError
from app.moderation.models import AuditEvent
from app.registry.models import LISTING_STATUSES, Repository
from app.registry.stats import invalidate_registry_stats
from app.reports.models import VISIBILITIES, Scan
from app.reports.service import recalculate_repository_metrics, refresh_repository_checks

REASON_MIN, REASON_MAX = 3, 100
NOTES_MIN, NOTES_MAX = 20, 4000
MODERATOR_ROLES = ("moderator", "admin")
ACTING_STATES = ("probation", "active")
# States that end every web session of the account at once.
LOCKED_OUT_STATES = ("suspended", "banned")


@dataclass(frozen=True)
class ActionOutcome:
    """What an action changed, as recorded in its audit event."""

    audit_event_id: int
    action: str
    subject_type: str
    subject_id: str
    before: dict[str, Any]
    after: dict[str, Any]


def can_moderate(account: Account | None) -> bool:
    """Platform moderators and admins in good standing (domain §1.6: mutations need probation/active)."""
    return account is not None and account.platform_role in MODERATOR_ROLES and account.state in ACTING_STATES


def validate_reason_notes(reason: str | None, notes: str | None, errors: dict[str, list[str]]) -> tuple[str, str]:
    """Trimmed reason (3..100) and notes (20..4000); messages are added to `errors` under the field name."""
    reason_t = (reason or "").strip()
    notes_t = (notes or "").strip()
    if not REASON_MIN <= len(reason_t) <= REASON_MAX:
        errors.setdefault("reason", []).append(
            f"must be {REASON_MIN} to {REASON_MAX} characters (after trimming), got {len(reason_t)}"
        )
    if not NOTES_MIN <= len(notes_t) <= NOTES_MAX:
        errors.setdefault("notes", []).append(
            f"must be {NOTES_MIN} to {NOTES_MAX} characters (after trimming), got {len(notes_t)}"
        )
    return reason_t, notes_t


def _check_choice(field: str, value: str | None, allowed: tuple[str, ...], errors: dict[str, list[str]]) -> None:
    if value not in allowed:
        errors.setdefault(field, []).append(f"must be one of {', '.join(allowed)}")


async def _load_actor(session: AsyncSession, actor_id: int) -> Account:
    """The actor as stored now (not as it was when its session loaded): a moderator suspended a second ago
    must not act."""
    actor = (await session.execute(select(Account).where(Account.id == actor_id))).scalar_one_or_none()
    if not can_moderate(actor):
        raise Forbidden({"base": ["only moderators and admins in good standing (probation or active) may moderate"]})
    assert actor is not None
    return actor


async def _audit(
    session: AsyncSession,
    *,
    actor: Account,
    action: str,
    subject_type: str,
    subject_id: str,
    before: dict[str, Any],
    after: dict[str, Any],
    reason: str,
    notes: str,
) -> ActionOutcome:
    event = AuditEvent(
        actor_id=actor.id,
        action=action,
        subject_type=subject_type,
        subject_id=subject_id,
        before=before,
        after=after,
        reason=reason,
        notes=notes,
    )
    session.add(event)
    await session.flush()
    return ActionOutcome(event.id, action, subject_type, subject_id, before, after)


async def _after_commit() -> None:
    await schedule_refresh_after_commit()
    invalidate_registry_stats()


async def change_scan_visibility(
    actor: Account, scan_id: int, visibility: str, reason: str, notes: str
) -> ActionOutcome:
    """Set a report's visibility (publish_full / publish_summary / restrict). Only `public` reports feed the
    atlas, so a change moves the report's pattern keys to the dirty set."""
    errors: dict[str, list[str]] = {}
    _check_choice("visibility", visibility, VISIBILITIES, errors)
    reason_t, notes_t = validate_reason_notes(reason, notes, errors)
    async with db.transaction() as session:
        actor = await _load_actor(session, actor.id)
        if errors:
            raise ValidationError(errors)
        scan = (await session.execute(select(Scan).where(Scan.id == scan_id).with_for_update())).scalar_one_or_none()
        if scan is None:
            raise NotFound({"scan_id": [f"no report with id {scan_id}"]})
        if scan.submitted_by_id == actor.id:
            raise Forbidden({"base": ["you cannot moderate a report you submitted"]})
        if scan.visibility == visibility:
            raise ValidationError({"visibility": [f"is already {visibility}"]})
        before = {"visibility": scan.visibility}
        scan.visibility = visibility
        scan.moderation_reason = reason_t
        scan.moderation_notes = notes_t
        scan.reviewed_at = db.utcnow()
        scan.reviewed_by_id = actor.id
        scan.updated_at = db.utcnow()
        await session.flush()
        # metrics count public and public_summary reports; a pending repository promoted to listed by its first
        # public report gets its keys dirtied inside (delist-safe discovery covers both directions)
        await recalculate_repository_metrics(session, scan.repository_id)
        await mark_scan_dirty(session, scan.id, "visibility")
        outcome = await _audit(
            session,
            actor=actor,
            action="scan.visibility",
            subject_type="scan",
            subject_id=str(scan.id),
            before=before,
            after={"visibility": visibility},
            reason=reason_t,
            notes=notes_t,
        )
    await _after_commit()
    return outcome


def parse_repository_slug(raw: str) -> tuple[str, str, str]:
    """`host/owner/name` → its three parts, lowercased and trimmed (how repositories are stored)."""
    parts = [p.strip().lower() for p in raw.strip().strip("/").split("/")]
    if len(parts) != 3 or not all(parts):
        raise ValidationError({"repository": ["must be HOST/OWNER/NAME, e.g. github.com/openai/codex"]})
    return parts[0], parts[1], parts[2]


async def change_repository_listing(
    actor: Account, host: str, owner: str, name: str, listing_status: str, reason: str, notes: str
) -> ActionOutcome:
    """Set a repository's listing status. Only `listed` repositories feed the atlas; the delist-safe key
    discovery finds the patterns it already contributes to even after it is quarantined."""
    errors: dict[str, list[str]] = {}
    _check_choice("listing_status", listing_status, LISTING_STATUSES, errors)
    reason_t, notes_t = validate_reason_notes(reason, notes, errors)
    host, owner, name = host.strip().lower(), owner.strip().lower(), name.strip().lower()
    async with db.transaction() as session:
        actor = await _load_actor(session, actor.id)
        if errors:
            raise ValidationError(errors)
        repo = (
            await session.execute(
                select(Repository)
                .where(Repository.host == host, Repository.owner == owner, Repository.name == name)
                .with_for_update()
            )
        ).scalar_one_or_none()
        slug = f"{host}/{owner}/{name}"
        if repo is None:
            raise NotFound({"repository": [f"no repository {slug}"]})
        if repo.listing_status == listing_status:
            raise ValidationError({"listing_status": [f"is already {listing_status}"]})
        before = {"listing_status": repo.listing_status}
        repo.listing_status = listing_status
        repo.updated_at = db.utcnow()
        await session.flush()
        await mark_repository_dirty(session, repo.id, "listing_change")
        outcome = await _audit(
            session,
            actor=actor,
            action="repository.listing",
            subject_type="repository",
            subject_id=slug,
            before=before,
            after={"listing_status": listing_status},
            reason=reason_t,
            notes=notes_t,
        )
    await _after_commit()
    return outcome


async def change_account(
    actor: Account,
    handle: str,
    *,
    platform_role: str | None = None,
    state: str | None = None,
    reason: str,
    notes: str,
) -> ActionOutcome:
    """Change an account's platform role and/or state. Only admins grant or revoke admin or change an admin;
    nobody changes their own account. Authority revalidation: every repository where the account recorded
    checks gets its canonical statuses recomputed (the account's checks may now count differently)."""
    errors: dict[str, list[str]] = {}
    platform_role = platform_role or None
    state = state or None
    if platform_role is None and state is None:
        errors.setdefault("base", []).append("choose a platform_role or a state to change")
    if platform_role is not None:
        _check_choice("platform_role", platform_role, PLATFORM_ROLES, errors)
    if state is not None:
        _check_choice("state", state, ACCOUNT_STATES, errors)
    reason_t, notes_t = validate_reason_notes(reason, notes, errors)
    handle = handle.strip().lower()
    async with db.transaction() as session:
        actor = await _load_actor(session, actor.id)
        if errors:
            raise ValidationError(errors)
        target = (
            await session.execute(select(Account).where(Account.handle == handle).with_for_update())
        ).scalar_one_or_none()
        if target is None:
            raise NotFound({"handle": [f"no account @{handle}"]})
        if target.id == actor.id:
            raise Forbidden({"base": ["you cannot change your own role or state"]})
        touches_admin = target.platform_role == "admin" or platform_role == "admin"
        if touches_admin and actor.platform_role != "admin":
            raise Forbidden({"base": ["only admins may grant or revoke admin or change an admin account"]})
        before: dict[str, Any] = {}
        after: dict[str, Any] = {}
        if platform_role is not None and platform_role != target.platform_role:
            before["platform_role"], after["platform_role"] = target.platform_role, platform_role
        if state is not None and state != target.state:
            before["state"], after["state"] = target.state, state
        if not after:
            same: dict[str, list[str]] = {}
            if platform_role is not None:
                same["platform_role"] = [f"is already {platform_role}"]
            if state is not None:
                same["state"] = [f"is already {state}"]
            raise ValidationError(same)
        if "platform_role" in after:
            target.platform_role = platform_role  # type: ignore[assignment]
        if "state" in after:
            target.state = state  # type: ignore[assignment]
        target.updated_at = db.utcnow()
        await session.flush()
        if target.state in LOCKED_OUT_STATES:
            await revoke_account_sessions(session, target.id)
        await _revalidate_authority(session, target.id)
        outcome = await _audit(
            session,
            actor=actor,
            action="account.change",
            subject_type="account",
            subject_id=target.handle,
            before=before,
            after=after,
            reason=reason_t,
            notes=notes_t,
        )
    await _after_commit()
    return outcome


async def _revalidate_authority(session: AsyncSession, account_id: int) -> None:
    """Recompute canonical statuses of every repository where the account recorded checks, in id order (a
    stable lock order against concurrent revalidations)."""
    repository_ids = (
        await session.execute(
            text(
                """SELECT DISTINCT c.repository_id FROM canonical_finding_checks k
                   JOIN canonical_findings c ON c.id = k.canonical_finding_id
                   WHERE k.account_id = :id ORDER BY c.repository_id"""
            ),
            {"id": account_id},
        )
    ).scalars()
    for repository_id in list(repository_ids):
        await refresh_repository_checks(session, repository_id)


async def pending_rollup_backlog() -> dict[str, Any]:
    """Pending rollup work: how many pattern keys wait for the worker and the age of the oldest, for the "the
    atlas will reflect it" message after an action."""
    async with db.read_session(replica=False) as session:
        row = (
            await session.execute(
                text(
                    """SELECT count(*) AS pending,
                              EXTRACT(EPOCH FROM now() - min(first_dirtied_at)) AS oldest
                       FROM infestation_dirty_keys"""
                )
            )
        ).one()
    oldest = float(row.oldest) if row.oldest is not None else None
    return {"pending": int(row.pending), "oldest_age_seconds": oldest}


def describe_backlog(backlog: dict[str, Any]) -> str:
    pending = int(backlog["pending"])
    if pending == 0:
        return "no rollup work pending; the atlas already reflects it"
    oldest = backlog["oldest_age_seconds"] or 0.0
    return f"{pending} key{'s' if pending != 1 else ''} pending, oldest {oldest:.0f}s; the atlas updates within seconds"
