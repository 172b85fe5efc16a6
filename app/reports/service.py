"""Reports: the only writer of scans, occurrences and canonical findings, one transaction each, of bodies
`app.reports.intake` prepared off the loop (docs/domain.md §1.2-§1.4, §2.6, §9; docs/security.md "Body budget").
Checks and confirmations, the verdicts on what a report stored, are app/reports/checks.py."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.accounts.models import Account
from app.kernel import db
from app.kernel.answers import as_json
from app.kernel.errors import ValidationError
from app.kernel.intake import off_loop
from app.kernel.purge import purge_after_commit
from app.kernel.quotas import exempt_from_quotas
from app.kernel.shared_cache import ATLAS_TAG, repository_tag
from app.kernel.sql import Fragment
from app.record.outbox import settle_new_report
from app.registry.metrics import (
    COUNT_NEW_REPORT,
    RECALCULATE,
    recalculate_repository_metrics,
    registry_counts_moved,
)
from app.reports.assimilation import Assimilated, assimilate_report, fingerprints_of
from app.reports.counters import REFRESH_COUNTERS
from app.reports.embargo import embargo_new_occurrences
from app.reports.evidence_gate import gate_report
from app.reports.held import LOW_SIGNAL
from app.reports.intake import prepare_report
from app.reports.policy import (
    SUBMIT_SCOPES,
    load_submitter,
    require_acting_state,
    require_not_paused,
    require_scope,
    require_within_limits,
    require_writable,
)
from app.reports.quorum import Tally, meets_quorum, tally_many
from app.reports.report_sql import (
    COUNTED_INSERT_SCAN,
    EXEMPT_INSERT_SCAN,
    STORED_RUN,
    VERIFY_SCAN,
    scan_values,
    store_pending,
)
from app.reports.serializers import linked_rows, new_report, pending_rows, report_answer, report_response
from app.reports.types import Report
from app.reports.validation import ReportInput

UNREGISTERED = {"repository": ["is not registered"]}

RUN_ID_TAKEN = {"run_id": ["this agent run was already submitted"]}

# An account's reports queue here, one at a time per process, before they take a pooled connection: queued on the
# account row's lock instead, a burst of one token held the whole pool (docs/security.md "Body budget").
_writers: weakref.WeakValueDictionary[int, asyncio.Lock] = weakref.WeakValueDictionary()


@asynccontextmanager
async def _one_writer(account_id: int) -> AsyncIterator[None]:
    lock = _writers.get(account_id)
    if lock is None:
        lock = _writers[account_id] = asyncio.Lock()
    async with lock:
        yield


async def submit_report(
    account: Account,
    host: str,
    owner: str,
    name: str,
    body: dict[str, Any],
    *,
    scopes: frozenset[str] | None = None,
) -> dict[str, Any]:
    """Submit one report body: prepared off the event loop (`intake.prepare_report`), then `store_report`; the 201
    body as plain JSON values (for a retry of a stored run, the stored report)."""
    require_scope(scopes, SUBMIT_SCOPES)
    report = await off_loop(lambda budget: prepare_report(body, budget))
    stored, _created = await store_report(account, host, owner, name, report)
    return as_json(stored)


async def store_report(
    account: Account,
    host: str,
    owner: str,
    name: str,
    report: ReportInput,
    *,
    token_id: int | None = None,
) -> tuple[Report, bool]:
    """Store a prepared report in one transaction, saying whether it stored it (True) or found the same run already
    stored by this account: same `run_id`, repository and content, i.e. a retry after a lost answer (False; the
    stored report, same id, nothing written). The same `run_id` with other content is still a 422.

    The lean path (docs/benchmarks.md "Ingest capacity"): the report's rows are written once, linked as they are
    inserted, and the answer is built from what the statements returned; nothing it wrote is read back.

    `token_id`: the API token the request came with, checked again in the first statement (its 401 when revoked);
    its scope was checked once, by the caller (the route's bearer check, or `submit_report`)."""
    gate = await gate_report(account.id, host, owner, name, report)  # the forge's time, before any lock is taken
    fingerprints = fingerprints_of(report.findings)  # CPU work, before any lock is taken
    async with _one_writer(account.id), db.transaction() as session:
        actor, found = await load_submitter(session, account.id, host, owner, name, token_id=token_id)
        require_acting_state(actor)
        repo = require_writable(actor, found, UNREGISTERED)
        require_not_paused(actor, repo)
        if gate is not None and gate.repository_id != repo.id:  # the name means another repository since the check
            gate = gate.undecided()
        report = report if gate is None else gate.report
        pending, committed_at = (False, None) if gate is None else (gate.pending, gate.committed_at)
        held = LOW_SIGNAL if actor.gated else None  # earned trust's gate, as the worker stored it
        values = {
            **scan_values(actor.id, repo.id, report, pending=pending, committed_at=committed_at),
            "repository_id": repo.id,
            "fingerprints": fingerprints.wanted,
        }
        # the insert and the canonicals known by the findings' fingerprints (the repository row is locked: no other
        # report adds any meanwhile), one row per canonical found, or one without
        if exempt_from_quotas(actor):  # no quota to count: a stored run is learnt from the insert
            inserted = await db.rows(session, EXEMPT_INSERT_SCAN, values)
        else:
            # the stored run and the §9 counts too, one snapshot taken after the account row was locked (a
            # concurrent submission by this account has committed or not yet begun): a retry is answered before
            # the quotas count it, and a refused report's insert goes with the transaction's rollback
            inserted = await db.rows(session, COUNTED_INSERT_SCAN, values)
            first = inserted[0]
            if first.stored_id is not None:
                if not first.same:
                    raise ValidationError(RUN_ID_TAKEN)
                return await report_response(session, int(first.stored_id)), False
            require_within_limits(actor, int(first.per_minute), int(first.per_repo_minute), int(first.per_day))
        scan_id = inserted[0].scan_id
        if scan_id is None:  # this account stored the run already
            stored = await _stored_run(session, actor.id, repo.id, report)
            if stored is None:
                raise ValidationError(RUN_ID_TAKEN)
            return await report_response(session, stored), False
        answer = new_report(report, repo, int(scan_id), pending=pending, committed_at=committed_at)
        if pending:  # stored unlinked and unpublished: nothing settled until the worker decides (app.evidence)
            return report_answer(answer, pending_rows(report, await store_pending(session, scan_id, report))), True
        assimilated, findings = await assimilate_report(
            session,
            scan_id=int(scan_id),
            repository_id=repo.id,
            commit_sha=report.commit_sha,
            model=report.model,
            findings=report.findings,
            fingerprints_found=(fingerprints, [r for r in inserted if r.id is not None]),
            defer_counters=True,
            held=held,
        )
        keys, embargoed = assimilated.keys, frozenset[int]()
        # coordinated disclosure: only when a window or an open embargo can apply (the common path runs no
        # statement more, issue 39)
        if report.disclosure_days is not None or repo.disclosure_days > 0 or repo.embargoes:
            embargoed = await embargo_new_occurrences(
                session, scan_id=int(scan_id), repository_id=repo.id, reporter_days=report.disclosure_days
            )
            keys = _announced_keys(assimilated, embargoed)
        verified = await _new_report_verified(session, assimilated, report.commit_sha)
        if verified:
            await db.rows(session, VERIFY_SCAN, {"id": scan_id})
        listing = repo.listing_status
        # no canonical's status moved: the counts move by this report alone, else they are counted from source
        recount: Fragment | None = RECALCULATE if assimilated.checked_ids else COUNT_NEW_REPORT
        if listing == "pending":  # the report lists it: the recount's own statement announces the repository first
            _before, listing = await recalculate_repository_metrics(session, repo.id, locked_listing=listing)
            recount = None
        else:  # a recount leaves any other listing as it is: it rides in the report's last statement
            registry_counts_moved()
        due = assimilated.counters_due  # the known canonicals' counters ride in the last statement too
        marked, _set = await settle_new_report(
            session, int(scan_id), repo.id, keys, listed=listing == "listed", recount=recount,
            alongside=(REFRESH_COUNTERS, {"ids": due}) if due else None,
        )  # fmt: skip
        if not marked:
            purge_after_commit(_unrolled_report_tags(repo.id, listing))
        answer |= {"verified_at": True if verified else None, "listing_status": listing}
        rows = linked_rows(report, assimilated.links, findings, held=held, embargoed=embargoed)
        return report_answer(answer, rows), True


def _announced_keys(assimilated: Assimilated, embargoed: frozenset[int]) -> set[str]:
    """The pattern keys a report's settle marks dirty: none only an embargoed canonical of it touched (its rollup
    does not move until the clock publishes it, and a dirty key is public news of the pattern)."""
    if not embargoed:
        return assimilated.keys
    public = {link.canonical.pattern_key for link in assimilated.links if link.canonical.id not in embargoed}
    hidden = {link.canonical.pattern_key for link in assimilated.links if link.canonical.id in embargoed}
    return {key for key in assimilated.keys if key not in hidden or key in public}


def _unrolled_report_tags(repository_id: int, listing: str) -> set[str]:
    """The shared-cache tags of a report that dirtied no pattern key (no findings, or none that feeds the atlas), so
    no drain purges for it: its repository's pages list it, and the home page (tagged `atlas`) lists the reports
    of listed repositories (docs/scaling.md "Shared cache")."""
    return {repository_tag(repository_id), ATLAS_TAG} if listing == "listed" else {repository_tag(repository_id)}


async def _stored_run(session: AsyncSession, account_id: int, repository_id: int, report: ReportInput) -> int | None:
    """The id of this account's stored report of `report.run_id` when it is the same report, None when the run is
    not stored; the run stored with other content is a 422."""
    row = (await session.execute(STORED_RUN, scan_values(account_id, repository_id, report))).first()
    if row is None:
        return None
    if not row.same:
        raise ValidationError(RUN_ID_TAKEN)
    return int(row.id)


async def _new_report_verified(session: AsyncSession, assimilated: Assimilated, commit_sha: str) -> bool:
    """§1.5 last paragraph for a report stored now: every canonical meets quorum at its commit (one created now or
    without checks does not: nothing to count); without canonicals its own confirmations, none yet."""
    ids = assimilated.canonical_ids
    if not ids or assimilated.created or len(assimilated.checked_ids) < len(ids):
        return False
    tallies = await tally_many(session, dict.fromkeys(ids, commit_sha))
    return all(meets_quorum(tallies.get(cid, Tally())) for cid in ids)
