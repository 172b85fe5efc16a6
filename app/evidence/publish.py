"""Publication of a report whose evidence was pending (docs/domain.md "Evidence at the commit"): each finding's
decision written, the confirmed ones linked as a new report's are, the report published, then the new report's
settle path (metrics and promotion, dirty keys, the per-report feed diff, webhooks, the Varnish purge), in the
caller's one transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import Row, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.kernel.purge import purge_after_commit
from app.kernel.shared_cache import ATLAS_TAG, repository_tag
from app.kernel.sql import Fragment
from app.record.outbox import settle_new_report
from app.registry.metrics import RECALCULATE, recalculate_repository_metrics, registry_counts_moved
from app.reports.assimilation import assimilate_scan
from app.reports.counters import refresh_counters_of
from app.reports.embargo import embargo_new_occurrences
from app.reports.models import Scan
from app.reports.quorum import recompute_scan_verification

Decided = Literal["confirmed", "unchecked", "refused", "expired"]


@dataclass(frozen=True)
class Decision:
    """One pending occurrence's outcome: `confirmed` (with its anchor) and `unchecked` (the gate was switched off
    meanwhile) are published; `refused` (with its reason) and `expired` never are."""

    finding_id: int
    state: Decided
    anchor: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Published:
    scan_id: int
    published: int  # occurrences published now
    withheld: int  # refused or expired
    keys: int  # pattern keys marked dirty
    listing: str  # the repository's listing afterwards


# The scan first, then its repository: the order a moderator's visibility change locks them in. Still pending only.
# With the reporter's gate as the worker last stored it (earned trust: its findings held for review, as at
# submission, app/reports/service.py) and its embargo request.
_LOCK_SCAN = text("""
SELECT id, repository_id, commit_sha, model, visibility, disclosure_days,
       coalesce((SELECT g.gated FROM account_signals g WHERE g.account_id = scans.submitted_by_id), false) AS gated
FROM scans WHERE id = :scan_id AND published_at IS NULL FOR UPDATE
""")
# and whether a coordinated-disclosure window can apply: its own, or an open embargo a duplicate joins
_LOCK_REPOSITORY = text("""
SELECT listing_status, disclosure_days > 0
         OR EXISTS (SELECT 1 FROM disclosures d WHERE d.repository_id = repositories.id AND d.state = 'embargoed')
         AS windowed
FROM repositories WHERE id = :repository_id FOR UPDATE
""")

# a gated reporter's just-linked occurrences held for review, as `assimilate_report(held=LOW_SIGNAL)` stores them
_HOLD_LOW_SIGNAL = text("""
UPDATE scan_findings SET published_at = NULL, held_reason = 'low_signal', updated_at = now()
WHERE scan_id = :scan_id AND canonical_finding_id IS NOT NULL AND published_at IS NOT NULL
RETURNING canonical_finding_id
""")
# the report's pattern keys that none of its published occurrences carries (every one held): not the settle's
_HELD_KEYS = text("""
SELECT c.pattern_key FROM scan_findings f JOIN canonical_findings c ON c.id = f.canonical_finding_id
WHERE f.scan_id = :scan_id AND c.pattern_key IS NOT NULL
GROUP BY c.pattern_key HAVING NOT bool_or(f.published_at IS NOT NULL)
""")

_DECIDE = text("""
UPDATE scan_findings f SET evidence_state = v.state, anchor = v.anchor, evidence_reason = v.reason,
  published_at = CASE WHEN v.state IN ('confirmed', 'unchecked') THEN now() END, updated_at = now()
FROM unnest(CAST(:ids AS bigint[]), CAST(:states AS text[]), CAST(:anchors AS text[]), CAST(:reasons AS text[]))
  AS v(id, state, anchor, reason)
WHERE f.id = v.id AND f.scan_id = :scan_id AND f.evidence_state = 'pending'
RETURNING f.id, f.published_at IS NOT NULL AS published
""")

# published with its confirmed findings; with none, it stays unpublished (nothing of it is ever public)
_PUBLISH_SCAN = text("""
UPDATE scans SET published_at = CASE WHEN :publish THEN now() END, evidence_next_at = NULL,
  commit_committed_at = coalesce(CAST(:committed_at AS timestamptz), commit_committed_at),
  run_id = CASE WHEN :release_run THEN NULL ELSE run_id END, updated_at = now()
WHERE id = :scan_id
""")


async def publish_decided(
    session: AsyncSession,
    scan_id: int,
    decisions: Sequence[Decision],
    *,
    committed_at: datetime | None = None,
    release_run: bool = False,
) -> Published | None:
    """Write every decision of the pending report `scan_id` and publish it with its confirmed findings (None when
    it is gone or no longer pending). `release_run`: clear its `run_id` (expiry: the same run may be sent again).
    Every pending finding must be decided: an undecided one would stay pending under a published report."""
    scan = (await session.execute(_LOCK_SCAN, {"scan_id": scan_id})).first()
    if scan is None:
        return None
    repository_id = int(scan.repository_id)
    repository = (await session.execute(_LOCK_REPOSITORY, {"repository_id": repository_id})).one()
    listing = str(repository.listing_status)
    rows = (
        await session.execute(
            _DECIDE,
            {
                "scan_id": scan_id,
                "ids": [d.finding_id for d in decisions],
                "states": [d.state for d in decisions],
                "anchors": [d.anchor for d in decisions],
                "reasons": [d.reason for d in decisions],
            },
        )
    ).all()
    published = sum(1 for r in rows if r.published)
    publish = published > 0
    params = {"scan_id": scan_id, "publish": publish, "committed_at": committed_at, "release_run": release_run}
    await session.execute(_PUBLISH_SCAN, params)
    if not publish:
        return Published(scan_id, 0, len(rows), 0, listing)
    # the confirmed occurrences (published, unlinked) linked as a new report's: canonicals, counters, statuses
    loaded = Scan(id=scan_id, repository_id=repository_id, commit_sha=str(scan.commit_sha), model=scan.model)
    keys = await assimilate_scan(session, loaded)
    held = await _hold(session, scan_id, scan, windowed=bool(repository.windowed))
    if held:
        keys = keys - {str(k) for k in (await session.execute(_HELD_KEYS, {"scan_id": scan_id})).scalars()}
    await recompute_scan_verification(session, scan_id)
    recount: Fragment | None = RECALCULATE
    if listing == "pending":  # the report lists it: the recount's own statement announces the repository first
        _before, listing = await recalculate_repository_metrics(session, repository_id, locked_listing=listing)
        recount = None
    else:
        registry_counts_moved()
    public = listing == "listed" and scan.visibility == "public"
    marked, _set = await settle_new_report(session, scan_id, repository_id, keys, listed=public, recount=recount)
    if not marked:  # no drain will purge for it
        purge_after_commit(
            {repository_tag(repository_id), ATLAS_TAG} if listing == "listed" else {repository_tag(repository_id)}
        )
    return Published(scan_id, published - held, len(rows) - published, marked, listing)


async def _hold(session: AsyncSession, scan_id: int, scan: Row[Any], *, windowed: bool) -> int:
    """What holds the report's just-linked occurrences, as at submission: its reporter's gate (held for review;
    their counters counted again without them) and coordinated disclosure (the clock opens now, the evidence's
    confirmation, with the stored request). How many occurrences are held."""
    low_signal: list[int] = []
    if scan.gated:
        low_signal = sorted({int(c) for c in (await session.execute(_HOLD_LOW_SIGNAL, {"scan_id": scan_id})).scalars()})
        await refresh_counters_of(session, low_signal)
    embargoed: frozenset[int] = frozenset()
    if scan.disclosure_days is not None or windowed:
        embargoed = await embargo_new_occurrences(
            session, scan_id=scan_id, repository_id=int(scan.repository_id), reporter_days=scan.disclosure_days
        )
        if embargoed:
            await refresh_counters_of(session, sorted(embargoed))
    return await _held_count(session, scan_id) if low_signal or embargoed else 0


_HELD_COUNT = text(
    "SELECT count(*) FROM scan_findings WHERE scan_id = :scan_id AND held_reason IS NOT NULL AND published_at IS NULL"
)


async def _held_count(session: AsyncSession, scan_id: int) -> int:
    return int((await session.execute(_HELD_COUNT, {"scan_id": scan_id})).scalar_one())
