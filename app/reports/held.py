"""Findings held for review (docs/domain.md "Earned trust"): an account whose signal is below the floor has its new
occurrences stored linked to their canonicals but unpublished (`scan_findings.held_reason = 'low_signal'`,
`published_at` NULL), so nothing public moves; a qualified reviewer's counted check of the canonical, a
maintainer's statement on it or a moderator's release of the account's queue publishes them, in the caller's
transaction, through the same settle path as a new report's (feed entries, dirty keys, metrics, purge). The same
release publishes a coordinated-disclosure embargo's held occurrences when its clock ends (app/reports/embargo.py)."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.kernel.purge import purge_after_commit
from app.kernel.shared_cache import ATLAS_TAG, repository_tag
from app.record.outbox import settle_new_report
from app.registry.metrics import recalculate_repository_metrics
from app.reports.counters import refresh_counters_of

LOW_SIGNAL = "low_signal"
EMBARGO = "embargo"  # coordinated disclosure's hold (app/reports/embargo.py)

# by canonical (a check, a statement, a clock's end) or by reporter (a moderator's release of the queue); the gates
# that remain (pending evidence: unlinked, so never here) are not this module's. A held-for-review occurrence whose
# canonical is still under embargo moves to the embargo's hold instead of publishing.
_RELEASE = text("""
UPDATE scan_findings f SET published_at = now(), held_reason = NULL, updated_at = now()
FROM scans s
WHERE s.id = f.scan_id AND f.held_reason = CAST(:reason AS text) AND f.published_at IS NULL
  AND (f.canonical_finding_id = ANY(CAST(:canonicals AS bigint[]))
       OR (CAST(:account_id AS bigint) IS NOT NULL AND s.submitted_by_id = CAST(:account_id AS bigint)))
RETURNING f.scan_id, f.canonical_finding_id, s.repository_id
""")
# first, the held-for-review ones still under embargo only change their hold: nothing public moves
_REHOLD = text("""
UPDATE scan_findings f SET held_reason = 'embargo', updated_at = now()
FROM scans s
WHERE s.id = f.scan_id AND f.held_reason = 'low_signal' AND f.published_at IS NULL
  AND (f.canonical_finding_id = ANY(CAST(:canonicals AS bigint[]))
       OR (CAST(:account_id AS bigint) IS NOT NULL AND s.submitted_by_id = CAST(:account_id AS bigint)))
  AND EXISTS (SELECT 1 FROM disclosures d WHERE d.canonical_finding_id = f.canonical_finding_id AND d.state = 'embargoed')
""")

_KEYS = text(
    "SELECT id, pattern_key FROM canonical_findings WHERE id = ANY(CAST(:ids AS bigint[])) AND pattern_key IS NOT NULL"
)
_VISIBILITY = text("SELECT visibility FROM scans WHERE id = :id")


async def release_held(
    session: AsyncSession, *, canonical_ids: Iterable[int] = (), account_id: int | None = None
) -> int:
    """Publish the held-for-review occurrences of these canonicals (or of this reporter): how many were published
    (one still under embargo moves to the embargo's hold)."""
    canonicals = sorted(set(canonical_ids))
    await session.execute(_REHOLD, {"canonicals": canonicals, "account_id": account_id})
    return await release_occurrences(session, LOW_SIGNAL, canonicals=canonicals, account_id=account_id)


async def release_occurrences(
    session: AsyncSession, reason: str, *, canonicals: Iterable[int] = (), account_id: int | None = None
) -> int:
    """Publish the occurrences held for `reason` of these canonicals (or of this reporter) and settle each report
    they belong to: how many were published."""
    params = {"reason": reason, "canonicals": sorted(set(canonicals)), "account_id": account_id}
    rows = (await session.execute(_RELEASE, params)).all()
    if not rows:
        return 0
    released = sorted({int(r.canonical_finding_id) for r in rows if r.canonical_finding_id is not None})
    await refresh_counters_of(session, released)
    keys = {int(r.id): str(r.pattern_key) for r in await session.execute(_KEYS, {"ids": released})}
    by_scan: dict[tuple[int, int], set[str]] = {}
    for r in rows:
        scan_keys = by_scan.setdefault((int(r.scan_id), int(r.repository_id)), set())
        if r.canonical_finding_id is not None and int(r.canonical_finding_id) in keys:
            scan_keys.add(keys[int(r.canonical_finding_id)])
    for (scan_id, repository_id), scan_keys in sorted(by_scan.items()):
        _before, listing = await recalculate_repository_metrics(session, repository_id)
        visibility = (await session.execute(_VISIBILITY, {"id": scan_id})).scalar_one()
        listed = listing == "listed" and visibility == "public"
        marked, _set = await settle_new_report(session, scan_id, repository_id, scan_keys, listed=listed)
        # the repository's pages list these findings themselves: purged now, not at the drain of its keys (a clock
        # that publishes while the worker is stopped is fresh through the shared cache at the next request)
        purge_after_commit(
            {repository_tag(repository_id), ATLAS_TAG} if listed and not marked else {repository_tag(repository_id)}
        )
    return len(rows)
