"""Findings held for review (docs/domain.md "Earned trust"): an account whose signal is below the floor has its new
occurrences stored linked to their canonicals but unpublished (`scan_findings.held_reason = 'low_signal'`,
`published_at` NULL), so nothing public moves; a qualified reviewer's counted check of the canonical, a
maintainer's statement on it or a moderator's release of the account's queue publishes them, in the caller's
transaction, through the same settle path as a new report's (feed entries, dirty keys, metrics, purge)."""

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

# by canonical (a check, a statement) or by reporter (a moderator's release of the queue); the gates that remain
# (pending evidence: unlinked, so never here) are not this module's
_RELEASE = text("""
UPDATE scan_findings f SET published_at = now(), held_reason = NULL, updated_at = now()
FROM scans s
WHERE s.id = f.scan_id AND f.held_reason = 'low_signal' AND f.published_at IS NULL
  AND (f.canonical_finding_id = ANY(CAST(:canonicals AS bigint[]))
       OR (CAST(:account_id AS bigint) IS NOT NULL AND s.submitted_by_id = CAST(:account_id AS bigint)))
RETURNING f.scan_id, f.canonical_finding_id, s.repository_id
""")

_KEYS = text(
    "SELECT id, pattern_key FROM canonical_findings WHERE id = ANY(CAST(:ids AS bigint[])) AND pattern_key IS NOT NULL"
)
_VISIBILITY = text("SELECT visibility FROM scans WHERE id = :id")


async def release_held(
    session: AsyncSession, *, canonical_ids: Iterable[int] = (), account_id: int | None = None
) -> int:
    """Publish the held occurrences of these canonicals (or of this reporter): how many were released."""
    rows = (await session.execute(_RELEASE, {"canonicals": sorted(set(canonical_ids)), "account_id": account_id})).all()
    if not rows:
        return 0
    canonicals = sorted({int(r.canonical_finding_id) for r in rows if r.canonical_finding_id is not None})
    await refresh_counters_of(session, canonicals)
    keys = {int(r.id): str(r.pattern_key) for r in await session.execute(_KEYS, {"ids": canonicals})}
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
        if not marked:
            purge_after_commit(
                {repository_tag(repository_id), ATLAS_TAG} if listed else {repository_tag(repository_id)}
            )
    return len(rows)
