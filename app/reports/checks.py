"""Checks and confirmations (docs/domain.md §1.5): the only writers of checks (a verdict on a canonical finding at a
commit) and of confirmations (a verdict on a report, copied onto checks of its canonicals at its commit), one
transaction each with the quorum, the reports' verification and the repository's metrics it moves, of bodies
`app.reports.intake` prepared off the loop."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypedDict

from sqlalchemy import TextClause, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.accounts.models import Account
from app.kernel import db
from app.kernel.answers import Answer, as_json
from app.kernel.errors import Forbidden, NotFound, ValidationError
from app.kernel.intake import off_loop
from app.kernel.sql import statement
from app.ops.secrets import client_ip_hash
from app.record.outbox import mark_dirty, mark_scan_dirty
from app.record.public import public_scan
from app.registry.metrics import recalculate_repository_metrics
from app.reports.held import release_held
from app.reports.intake import prepare_verdict
from app.reports.models import CanonicalFindingCheck, ScanConfirmation
from app.reports.policy import VERIFY_SCOPES, load_actor, require_report_writable, require_scope, require_verifier_on
from app.reports.quorum import (
    recompute_canonical_status,
    recompute_scan_verification,
    recompute_scans_at_commit,
    why_not_counted,
)
from app.reports.serializers import check_response, confirmation_response
from app.reports.types import Check, Confirmation
from app.reports.validation import VerdictInput

FINDING_NOT_FOUND = {"finding": ["not found"]}
REPORT_NOT_FOUND = {"report": ["not found"]}


async def _insert_once(session: AsyncSession, row: object, unique_index: str, taken: dict[str, list[str]]) -> None:
    """Insert a row guarded by a unique index; losing the race (or repeating oneself) is a 422, not a 500."""
    try:
        async with session.begin_nested():
            session.add(row)
            await session.flush()
    except IntegrityError as exc:
        if unique_index in str(exc.orig):
            raise ValidationError(taken) from None
        raise


# the canonical's newest public occurrence at a commit (a check must be about something the public can see)
_PUBLIC_OCCURRENCE_AT = statement(
    "SELECT f.id FROM scan_findings f JOIN scans s ON s.id = f.scan_id "
    "WHERE f.canonical_finding_id = :cid AND s.commit_sha = :sha AND {public} "
    "ORDER BY s.inserted_at DESC, f.id DESC LIMIT 1",
    public=public_scan(),
)


async def _subject(session: AsyncSession, query: TextClause, subject_id: object, hidden: dict[str, list[str]]) -> Any:
    """The one row `query` finds for `:id`, or NotFound with `hidden`."""
    row = (await session.execute(query, {"id": subject_id})).first()
    if row is None:
        raise NotFound(hidden)
    return row


async def _record_verdict(
    body: dict[str, Any],
    scopes: frozenset[str] | None,
    *,
    check: bool,
    store: Callable[[VerdictInput], Awaitable[Answer]],
) -> dict[str, Any]:
    """The Python entry points' path: the scope, the verdict body (a check's, or a report's when not `check`)
    prepared off the event loop, then `store`; its answer as plain JSON values."""
    require_scope(scopes, VERIFY_SCOPES)
    verdict = await off_loop(lambda budget: prepare_verdict(body, budget, check=check))
    return as_json(await store(verdict))


class _Recorded(TypedDict):
    account_id: int
    verdict: str
    provenance: str
    notes: str
    evidence: str | None
    client_ip_hash: bytes | None


def _recorded(verdict: VerdictInput, account_id: int, ip_hash: bytes | None) -> _Recorded:
    """The columns every check and confirmation records of its verdict and of who gave it (the commit aside)."""
    return {
        "account_id": account_id,
        "verdict": verdict.verdict,
        "provenance": verdict.provenance,
        "notes": verdict.notes,
        "evidence": verdict.evidence,
        "client_ip_hash": ip_hash,
    }


CHECK_TAKEN = {"commit_sha": ["you already checked this finding at this commit"]}


async def record_check(
    account: Account,
    canonical_public_id: str,
    body: dict[str, Any],
    *,
    client_ip: str | None = None,
    scopes: frozenset[str] | None = None,
) -> dict[str, Any]:
    """Record a check body: prepared off the event loop, then `store_check`; its answer as plain JSON values."""
    return await _record_verdict(
        body,
        scopes,
        check=True,
        store=lambda check: store_check(account, canonical_public_id, check, client_ip=client_ip),
    )


async def store_check(
    account: Account,
    canonical_public_id: str,
    check: VerdictInput,
    *,
    client_ip: str | None = None,
) -> Check:
    """A verdict on a canonical finding at a commit (§1.5), then its quorum, the affected reports' verification
    and the repository metrics, in one transaction (the scope checked by the caller, as `store_report`'s)."""
    try:
        public_id = uuid.UUID(str(canonical_public_id))
    except ValueError:
        raise NotFound(FINDING_NOT_FOUND) from None
    ip_hash = await client_ip_hash(client_ip)
    async with db.transaction() as session:
        actor = await load_actor(session, account.id, lock=False)
        found = await _subject(
            session,
            text("SELECT id, repository_id FROM canonical_findings WHERE public_id = :id"),
            public_id,
            FINDING_NOT_FOUND,
        )
        canonical_id, repository_id = int(found[0]), int(found[1])
        await require_verifier_on(session, actor, repository_id, FINDING_NOT_FOUND)
        assert check.commit_sha is not None
        # serialize checks on one canonical so each quorum recompute sees the others
        await session.execute(text("SELECT 1 FROM canonical_findings WHERE id = :id FOR UPDATE"), {"id": canonical_id})
        occurrence = (
            await session.execute(_PUBLIC_OCCURRENCE_AT, {"cid": canonical_id, "sha": check.commit_sha})
        ).scalar_one_or_none()
        if occurrence is None:
            raise ValidationError({"commit_sha": ["not found: this finding has no public occurrence at this commit"]})
        authored = await session.execute(
            text(
                "SELECT 1 FROM scan_findings f JOIN scans s ON s.id = f.scan_id "
                "WHERE f.canonical_finding_id = :cid AND s.commit_sha = :sha AND s.submitted_by_id = :aid LIMIT 1"
            ),
            {"cid": canonical_id, "sha": check.commit_sha, "aid": actor.id},
        )
        if authored.first() is not None:
            raise Forbidden({"account": ["conflict of interest: you reported this finding at this commit"]})
        row = CanonicalFindingCheck(
            canonical_finding_id=canonical_id,
            scan_finding_id=int(occurrence),
            commit_sha=check.commit_sha,
            **_recorded(check, actor.id, ip_hash),
        )
        await _insert_once(session, row, "canonical_finding_checks_unique_idx", CHECK_TAKEN)
        await recompute_canonical_status(session, canonical_id)
        await recompute_scans_at_commit(session, canonical_id, check.commit_sha)
        await recalculate_repository_metrics(session, repository_id)
        key = (
            await session.execute(
                text("SELECT pattern_key FROM canonical_findings WHERE id = :id"), {"id": canonical_id}
            )
        ).scalar_one()
        await mark_dirty(session, [key], "status", repository_id=repository_id)
        reason = await why_not_counted(session, row.id)
        if reason is None:  # a counted check of any verdict releases what was held for low signal
            await release_held(session, canonical_ids=[canonical_id])
        return await check_response(session, row.id, reason=reason)


CONFIRMATION_TAKEN = {"scan": ["you already recorded a verdict on this report"]}

# Copy a report-level verdict onto a check for every canonical of the report at its commit (insert-or-ignore),
# skipping canonicals the confirmer reported at that commit themselves (conflict of interest).
_COPY_TO_CHECKS = """
INSERT INTO canonical_finding_checks
  (canonical_finding_id, scan_finding_id, account_id, commit_sha, verdict, provenance, notes, evidence, client_ip_hash)
SELECT DISTINCT ON (f.canonical_finding_id) f.canonical_finding_id, f.id, :account_id, s.commit_sha, :verdict,
       :provenance, :notes, :evidence, :client_ip_hash
FROM scan_findings f JOIN scans s ON s.id = f.scan_id
WHERE f.scan_id = :scan_id AND f.canonical_finding_id IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM scan_findings o JOIN scans os ON os.id = o.scan_id
                  WHERE o.canonical_finding_id = f.canonical_finding_id AND os.commit_sha = s.commit_sha
                    AND os.submitted_by_id = :account_id)
ORDER BY f.canonical_finding_id, f.position
ON CONFLICT (canonical_finding_id, account_id, commit_sha) DO NOTHING
RETURNING canonical_finding_id
"""


async def record_confirmation(
    account: Account,
    scan_id: int,
    body: dict[str, Any],
    *,
    client_ip: str | None = None,
    scopes: frozenset[str] | None = None,
) -> dict[str, Any]:
    """Record a report-level verdict body: prepared off the event loop, then `store_confirmation`; its answer as
    plain JSON values."""
    return await _record_verdict(
        body,
        scopes,
        check=False,
        store=lambda verdict: store_confirmation(account, scan_id, verdict, client_ip=client_ip),
    )


async def store_confirmation(
    account: Account,
    scan_id: int,
    verdict: VerdictInput,
    *,
    client_ip: str | None = None,
) -> Confirmation:
    """A report-level verdict (confirmed/disputed), copied onto checks of the report's canonicals at its commit."""
    ip_hash = await client_ip_hash(client_ip)
    async with db.transaction() as session:
        actor = await load_actor(session, account.id, lock=False)
        found = await _subject(
            session,
            text("SELECT repository_id, submitted_by_id, visibility FROM scans WHERE id = :id"),
            scan_id,
            REPORT_NOT_FOUND,
        )
        repository_id, submitter_id, visibility = int(found[0]), int(found[1]), str(found[2])
        require_report_writable(actor, visibility=visibility, submitted_by_id=submitter_id, hidden=REPORT_NOT_FOUND)
        await require_verifier_on(session, actor, repository_id, REPORT_NOT_FOUND)
        if submitter_id == actor.id:
            raise Forbidden({"account": ["conflict of interest: you submitted this report"]})
        await session.execute(text("SELECT 1 FROM scans WHERE id = :id FOR UPDATE"), {"id": scan_id})
        confirmation = ScanConfirmation(scan_id=scan_id, **_recorded(verdict, actor.id, ip_hash))
        await _insert_once(session, confirmation, "scan_confirmations_unique_idx", CONFIRMATION_TAKEN)
        copied: list[int] = []
        # checks need a public occurrence at the commit, so only a public report's verdict reaches canonicals
        if visibility == "public":
            copied = [
                int(c)
                for c in (
                    await session.execute(
                        text(_COPY_TO_CHECKS), {**_recorded(verdict, actor.id, ip_hash), "scan_id": scan_id}
                    )
                ).scalars()
            ]
        commit_sha = (
            await session.execute(text("SELECT commit_sha FROM scans WHERE id = :id"), {"id": scan_id})
        ).scalar_one()
        for canonical_id in sorted(copied):
            await recompute_canonical_status(session, canonical_id)
            # other reports of the same finding at the same commit gain the same checks
            await recompute_scans_at_commit(session, canonical_id, str(commit_sha))
        await recompute_scan_verification(session, scan_id)  # its own tallies, and reports without findings
        await recalculate_repository_metrics(session, repository_id)
        await mark_scan_dirty(session, scan_id, "status")
        return await confirmation_response(session, confirmation.id, checks_recorded=len(copied))
