"""Publication of a report whose evidence was pending (docs/domain.md "Evidence at the commit"): each finding's
decision written, the confirmed ones linked as a new report's are, the report published, then the new report's
settle path (metrics and promotion, dirty keys, the per-report feed diff, webhooks, the Varnish purge), in the
caller's one transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.kernel.purge import purge_after_commit
from app.kernel.shared_cache import ATLAS_TAG, repository_tag
from app.kernel.sql import Fragment
from app.record.outbox import settle_new_report
from app.registry.metrics import RECALCULATE, recalculate_repository_metrics, registry_counts_moved
from app.reports.assimilation import assimilate_scan
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
_LOCK_SCAN = text(
    "SELECT id, repository_id, commit_sha, model, visibility FROM scans "
    "WHERE id = :scan_id AND published_at IS NULL FOR UPDATE"
)
_LOCK_REPOSITORY = text("SELECT listing_status FROM repositories WHERE id = :repository_id FOR UPDATE")

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
    listing = str((await session.execute(_LOCK_REPOSITORY, {"repository_id": repository_id})).scalar_one())
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
    return Published(scan_id, published, len(rows) - published, marked, listing)
