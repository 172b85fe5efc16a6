"""A moderator's actions on an account (docs/domain.md §8, "Maintainers"): a change of its platform role or state,
with what a lock-out takes from it in the same transaction (its maintainerships, its statements) and the authority
revalidation of the checks it recorded; and the hide of every shown statement of one handle. Each one transaction, one
audited action (`app.moderation.service.act`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.accounts.models import ACCOUNT_STATES, PLATFORM_ROLES, Account
from app.accounts.sessions import revoke_account_sessions
from app.kernel import db
from app.kernel.actors import can_change_roles, has_moderator_role, is_locked_out
from app.kernel.audit import record_audit
from app.kernel.errors import Forbidden, NotFound, ValidationError
from app.maintainers import service as maintainers
from app.maintainers import statements
from app.moderation.service import (
    MAINTAINER_END_ACTION,
    ActionOutcome,
    Change,
    act,
    check_choice,
    lock_other_account,
    validate_reason_notes,
)
from app.reports.quorum import refresh_repository_checks

STATEMENTS_HIDE_ACTION = "account.statements_hide"


async def change_account(
    actor: Account,
    handle: str,
    *,
    platform_role: str | None = None,
    state: str | None = None,
    reason: str,
    notes: str,
) -> ActionOutcome:
    """Change an account's platform role and/or state. Only admins change roles or touch a moderator or admin
    account (`can_change_roles`); moderators change the states of members; nobody changes their own account.
    Authority revalidation: every repository where the account recorded checks gets its canonical statuses
    recomputed (the account's checks may now count differently)."""
    errors: dict[str, list[str]] = {}
    platform_role = platform_role or None
    state = state or None
    if platform_role is None and state is None:
        errors.setdefault("base", []).append("choose a platform_role or a state to change")
    if platform_role is not None:
        check_choice("platform_role", platform_role, PLATFORM_ROLES, errors)
    if state is not None:
        check_choice("state", state, ACCOUNT_STATES, errors)
    reason_t, notes_t = validate_reason_notes(reason, notes, errors)
    handle = handle.strip().lower()

    async def step(session: AsyncSession, actor: Account) -> Change:
        target = await lock_other_account(session, handle, actor, "you cannot change your own role or state")
        if platform_role is not None and platform_role != target.platform_role and not can_change_roles(actor):
            raise Forbidden({"platform_role": ["only admins may change platform roles"]})
        if has_moderator_role(target) and not can_change_roles(actor):
            # else another moderator could undo an admin's ban of a rogue moderator
            what = f"only admins may change the state of a {target.platform_role} account"
            raise Forbidden({"state" if state is not None else "base": [what]})
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
        if is_locked_out(target):
            await revoke_account_sessions(session, target.id)
            if "state" in after:
                await _lock_out(session, target, actor, before, after, notes=notes_t)
        await _revalidate_authority(session, target.id)
        return Change("account", target.handle, before, after)

    return await act(actor.id, "account.change", step, errors=errors, reason=reason_t, notes=notes_t)


async def _lock_out(
    session: AsyncSession, target: Account, actor: Account, before: dict[str, Any], after: dict[str, Any], *, notes: str
) -> None:
    """A banned or suspended account loses its voice in the transaction that locked it (docs/domain.md
    "Maintainers"): its maintainerships end (each audited on its repository, reason `account_locked`) and its
    statements are hidden (each audited, as a moderator's hide). The account's event names both."""
    ended = await maintainers.end_account_maintainerships(session, target.id, ended_by_id=actor.id)
    for one in ended:
        await record_audit(
            session,
            actor_id=actor.id,
            action=MAINTAINER_END_ACTION,
            subject_type="repository",
            subject_id=one.repository,
            before={"maintainer": f"@{target.handle}", "participation_mode": one.mode_before},
            after={"maintainer": None, "participation_mode": one.mode_after},
            reason=maintainers.ACCOUNT_LOCKED,
            notes=notes,
        )
    hidden = await _hide_statements(session, target, actor, reason=maintainers.ACCOUNT_LOCKED, notes=notes)
    if ended:
        before["maintainerships"], after["maintainerships"] = [one.repository for one in ended], []
    if hidden:
        before["statements_shown"], after["statements_shown"] = hidden, 0


async def _hide_statements(session: AsyncSession, target: Account, actor: Account, *, reason: str, notes: str) -> int:
    """Hide every shown statement of `target`, one audit event each (the public pages' markers and the OpenVEX
    document's version read them). Returns how many."""
    hidden = await statements.hide_statements_by(session, target.id, actor_id=actor.id)
    for statement_id in hidden.statement_ids:
        await record_audit(
            session,
            actor_id=actor.id,
            action=statements.VISIBILITY_ACTION,
            subject_type=statements.AUDIT_SUBJECT,
            subject_id=str(statement_id),
            before={"visibility": statements.SHOWN},
            after={"visibility": statements.HIDDEN},
            reason=reason,
            notes=notes,
        )
    return len(hidden.statement_ids)


async def hide_account_statements(actor: Account, handle: str, reason: str, notes: str) -> ActionOutcome:
    """Hide every shown statement of one handle in one action (docs/domain.md "Maintainers"): each a takedown as
    one hide is (feed entries, purges, the export's rebuild, an audit event per statement), and one event for the
    action. 422 naming `handle` when it has no shown statement."""
    errors: dict[str, list[str]] = {}
    reason_t, notes_t = validate_reason_notes(reason, notes, errors)
    handle = handle.strip().lower()

    async def step(session: AsyncSession, actor: Account) -> Change:
        target = (await session.execute(select(Account).where(Account.handle == handle))).scalar_one_or_none()
        if target is None:
            raise NotFound({"handle": [f"no account @{handle}"]})
        hidden = await _hide_statements(session, target, actor, reason=reason_t, notes=notes_t)
        if not hidden:
            raise ValidationError({"handle": [f"@{target.handle} has no shown statement to hide"]})
        return Change("account", target.handle, {"statements_shown": hidden}, {"statements_shown": 0})

    return await act(actor.id, STATEMENTS_HIDE_ACTION, step, errors=errors, reason=reason_t, notes=notes_t)


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
