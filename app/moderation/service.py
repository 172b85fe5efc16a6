"""Moderation actions, the one writer for the console and the CLI, and the hard delete of a repository: each one
transaction, one audit event (docs/domain.md §8), through `act`, which an account's actions
(app/moderation/account_actions.py), a gate's pin (signal.py) and a clock's change (disclosures.py) take too."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypedDict

from sqlalchemy import delete, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.accounts.models import Account
from app.kernel import db
from app.kernel.actors import can_moderate
from app.kernel.audit import record_audit
from app.kernel.errors import Forbidden, NotFound, ValidationError
from app.kernel.refs import normalize_ref, ref_slug
from app.maintainers import service as maintainers
from app.maintainers import statements, webhooks
from app.maintainers.models import STATEMENT_VISIBILITIES
from app.record.outbox import mark_repository_dirty, mark_scan_dirty
from app.registry.listing_status import set_listing_status
from app.registry.metrics import recalculate_repository_metrics, registry_changed
from app.registry.models import LISTING_STATUSES, Repository
from app.registry.validation import validate_repo_ref
from app.reports.models import VISIBILITIES, CanonicalFinding, Scan, ScanFinding

REASON_MIN, REASON_MAX = 3, 100
NOTES_MIN, NOTES_MAX = 20, 4000
NOT_A_MODERATOR = {"base": ["only moderators and admins in good standing (probation or active) may moderate"]}
MAINTAINER_END_ACTION = "repository.maintainer_end"


@dataclass(frozen=True)
class ActionOutcome:
    """What an action changed, as recorded in its audit event."""

    audit_event_id: int
    action: str
    subject_type: str
    subject_id: str
    before: dict[str, Any]
    after: dict[str, Any]


@dataclass(frozen=True)
class Change:
    """What an action's step did to its subject: the audit event's subject and its before → after values."""

    subject_type: str
    subject_id: str
    before: dict[str, Any]
    after: dict[str, Any] | None


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


def check_choice(field: str, value: str | None, allowed: tuple[str, ...], errors: dict[str, list[str]]) -> None:
    if value not in allowed:
        errors.setdefault(field, []).append(f"must be one of {', '.join(allowed)}")


async def act(
    actor_id: int,
    action: str,
    step: Callable[[AsyncSession, Account], Awaitable[Change]],
    *,
    errors: dict[str, list[str]] | None = None,
    reason: str | None,
    notes: str | None,
    forbidden: dict[str, list[str]] = NOT_A_MODERATOR,
) -> ActionOutcome:
    """One audited action in one transaction: the actor as stored now (a moderator suspended a second ago must
    not act), then the validation errors, then `step`, then its audit event."""
    async with db.transaction() as session:
        actor = (await session.execute(select(Account).where(Account.id == actor_id))).scalar_one_or_none()
        if actor is None or not can_moderate(actor):
            raise Forbidden(forbidden)
        if errors:
            raise ValidationError(errors)
        change = await step(session, actor)
        event = await record_audit(
            session,
            actor_id=actor.id,
            action=action,
            subject_type=change.subject_type,
            subject_id=change.subject_id,
            before=change.before,
            after=change.after,
            reason=reason,
            notes=notes,
        )
        registry_changed()
    return ActionOutcome(event.id, action, change.subject_type, change.subject_id, change.before, change.after or {})


async def lock_other_account(session: AsyncSession, handle: str, actor: Account, own: str) -> Account:
    """The account `@handle` an action is about, locked for the action's transaction: 404 naming the handle, 403
    (`own`) when it is the actor's own."""
    target = (
        await session.execute(select(Account).where(Account.handle == handle).with_for_update())
    ).scalar_one_or_none()
    if target is None:
        raise NotFound({"handle": [f"no account @{handle}"]})
    if target.id == actor.id:
        raise Forbidden({"base": [own]})
    return target


async def change_scan_visibility(
    actor: Account, scan_id: int, visibility: str, reason: str, notes: str
) -> ActionOutcome:
    """Set a report's visibility (publish_full / publish_summary / restrict). Only `public` reports feed the
    atlas, so a change moves the report's pattern keys to the dirty set."""
    errors: dict[str, list[str]] = {}
    check_choice("visibility", visibility, VISIBILITIES, errors)
    reason_t, notes_t = validate_reason_notes(reason, notes, errors)

    async def step(session: AsyncSession, actor: Account) -> Change:
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
        return Change("scan", str(scan.id), before, {"visibility": visibility})

    return await act(actor.id, "scan.visibility", step, errors=errors, reason=reason_t, notes=notes_t)


async def _locked_repository(session: AsyncSession, host: str, owner: str, name: str) -> Repository | None:
    return (
        await session.execute(
            select(Repository)
            .where(Repository.host == host, Repository.owner == owner, Repository.name == name)
            .with_for_update()
        )
    ).scalar_one_or_none()


async def change_repository_listing(
    actor: Account, host: str, owner: str, name: str, listing_status: str, reason: str, notes: str
) -> ActionOutcome:
    """Set a repository's listing status. Only `listed` repositories feed the atlas; the delist-safe key
    discovery finds the patterns it already contributes to even after it is quarantined."""
    errors: dict[str, list[str]] = {}
    check_choice("listing_status", listing_status, LISTING_STATUSES, errors)
    reason_t, notes_t = validate_reason_notes(reason, notes, errors)
    host, owner, name = normalize_ref(host, owner, name)
    slug = ref_slug(host, owner, name)

    async def step(session: AsyncSession, actor: Account) -> Change:
        repo = await _locked_repository(session, host, owner, name)
        if repo is None:
            raise NotFound({"repository": [f"no repository {slug}"]})
        if repo.listing_status == listing_status:
            raise ValidationError({"listing_status": [f"is already {listing_status}"]})
        before = await set_listing_status(session, repo, listing_status)
        return Change("repository", slug, before, {"listing_status": listing_status})

    return await act(actor.id, "repository.listing", step, errors=errors, reason=reason_t, notes=notes_t)


async def end_maintainership(
    actor: Account, host: str, owner: str, name: str, handle: str, reason: str, notes: str
) -> ActionOutcome:
    """End an account's current maintainership of a repository (docs/domain.md "Maintainers"): the last one's end
    gives the repository back the participation mode verification replaced."""
    errors: dict[str, list[str]] = {}
    reason_t, notes_t = validate_reason_notes(reason, notes, errors)
    host, owner, name = normalize_ref(host, owner, name)
    slug = ref_slug(host, owner, name)
    handle = handle.strip().lower()

    async def step(session: AsyncSession, actor: Account) -> Change:
        repo = await _locked_repository(session, host, owner, name)
        if repo is None:
            raise NotFound({"repository": [f"no repository {slug}"]})
        target = (await session.execute(select(Account).where(Account.handle == handle))).scalar_one_or_none()
        maintainer = await maintainers.lock_current_maintainer(session, repo.id, target.id) if target else None
        if target is None or maintainer is None:
            raise NotFound({"handle": [f"@{handle} does not maintain {slug}"]})
        mode = repo.participation_mode
        await maintainers.end_maintainership(session, maintainer, reason="moderation", ended_by_id=actor.id)
        before = {"maintainer": f"@{target.handle}", "participation_mode": mode}
        return Change("repository", slug, before, {"maintainer": None, "participation_mode": repo.participation_mode})

    return await act(actor.id, MAINTAINER_END_ACTION, step, errors=errors, reason=reason_t, notes=notes_t)


async def change_statement_visibility(
    actor: Account, statement_id: int, visibility: str, reason: str, notes: str
) -> ActionOutcome:
    """Hide or show a maintainer's statement (docs/domain.md "Maintainers"). A hide is a takedown: the statement
    leaves every surface at the next request, its feed entries are redacted and the bulk export is rebuilt."""
    errors: dict[str, list[str]] = {}
    check_choice("visibility", visibility, STATEMENT_VISIBILITIES, errors)
    reason_t, notes_t = validate_reason_notes(reason, notes, errors)

    async def step(session: AsyncSession, actor: Account) -> Change:
        change = await statements.change_visibility(session, statement_id, visibility, actor_id=actor.id)
        return Change(statements.AUDIT_SUBJECT, str(statement_id), change.before, change.after)

    return await act(actor.id, statements.VISIBILITY_ACTION, step, errors=errors, reason=reason_t, notes=notes_t)


async def delete_webhook(actor: Account, webhook_id: int, reason: str, notes: str) -> ActionOutcome:
    """Delete a maintainer's webhook and its delivery log, whoever owns it (docs/domain.md "Webhooks"): audited on
    its repository, naming its owner and destination host (never the URL's path, which may hold a token)."""
    errors: dict[str, list[str]] = {}
    reason_t, notes_t = validate_reason_notes(reason, notes, errors)

    async def step(session: AsyncSession, actor: Account) -> Change:
        gone = await webhooks.remove_webhook(session, webhook_id)
        before = {"webhook": gone.id, "owner": f"@{gone.owner}", "destination": gone.destination}
        return Change("repository", gone.repository, before, {"webhook": None})

    return await act(actor.id, webhooks.DELETE_ACTION, step, errors=errors, reason=reason_t, notes=notes_t)


async def delete_repository(
    host: str, owner: str, name: str, *, actor_id: int, reason: str | None = None, notes: str | None = None
) -> None:
    """Hard-delete a repository with its reports and findings (moderators and admins only), in one transaction.

    The patterns it fed are marked dirty *before* the rows go (the key discovery reads them), and the rollup
    worker is rung after the commit. A moderation action: it reaches into the reports' tables, which the
    registry (below reports) may not.
    """
    ref = validate_repo_ref(host, owner, name)

    async def step(session: AsyncSession, actor: Account) -> Change:
        repository = await _locked_repository(session, *ref)
        if repository is None:
            raise NotFound({"repository": [f"{ref_slug(*ref)} is not registered"]})
        await mark_repository_dirty(session, repository.id, "delete")
        before = {
            "host": repository.host,
            "owner": repository.owner,
            "name": repository.name,
            "listing_status": repository.listing_status,
            "scan_count": repository.scan_count,
            "open_findings_count": repository.open_findings_count,
        }
        # scan_findings.canonical_finding_id is ON DELETE RESTRICT: occurrences go first (with their reports),
        # then the canonicals (their checks cascade), then the repository (rollup rows cascade).
        scan_ids = select(Scan.id).where(Scan.repository_id == repository.id)
        await session.execute(delete(ScanFinding).where(ScanFinding.scan_id.in_(scan_ids)))
        await session.execute(delete(Scan).where(Scan.repository_id == repository.id))
        await session.execute(delete(CanonicalFinding).where(CanonicalFinding.repository_id == repository.id))
        await session.execute(delete(Repository).where(Repository.id == repository.id))
        return Change("repository", str(repository.id), before, None)

    forbidden = {"actor": ["only an active moderator or admin may delete a repository"]}
    await act(actor_id, "repository.delete", step, reason=reason, notes=notes, forbidden=forbidden)


class RollupBacklog(TypedDict):
    """Pending rollup work: pattern keys waiting for the worker and the age of the oldest (None: none waits)."""

    pending: int
    oldest_age_seconds: float | None


async def pending_rollup_backlog() -> RollupBacklog:
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


def describe_backlog(backlog: RollupBacklog) -> str:
    pending = backlog["pending"]
    if pending == 0:
        return "no rollup work pending; the atlas already reflects it"
    oldest = backlog["oldest_age_seconds"] or 0.0
    return f"{pending} key{'s' if pending != 1 else ''} pending, oldest {oldest:.0f}s; the atlas updates within seconds"
