"""Repository metrics (docs/domain.md §1.7), recomputed from the visible reports by the service that changed them, in
its transaction; the reports' tables are only read here."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from app.kernel.aftercommit import after_commit
from app.kernel.sql import Fragment
from app.record.outbox import mark_repository_dirty
from app.registry.stats import invalidate_registry_stats, invalidate_registry_stats_throttled

# Returns the listing it set, only when a count or the listing moved. Also a CTE of the report's last statement
# (app.reports.service), which its sibling CTEs never read: they read no repository row.
RECALCULATE = Fragment("""
WITH visible AS (
  SELECT id, inserted_at FROM scans
  WHERE repository_id = :repository_id AND visibility IN ('public', 'public_summary') AND published_at IS NOT NULL
), scan_stats AS (
  SELECT count(*) AS scans, max(inserted_at) AS last_scanned FROM visible
), canonical_stats AS (
  SELECT count(*) FILTER (WHERE c.status <> 'fixed') AS open, count(*) FILTER (WHERE c.status = 'verified') AS verified
  FROM canonical_findings c
  WHERE c.repository_id = :repository_id
    AND EXISTS (SELECT 1 FROM scan_findings f JOIN visible v ON v.id = f.scan_id
                WHERE f.canonical_finding_id = c.id AND f.published_at IS NOT NULL)
), target AS (
  SELECT scans, last_scanned, open, verified,
         CASE WHEN scans = 0 THEN 'unscanned' WHEN open > 0 THEN 'findings' ELSE 'reviewed' END AS status
  FROM scan_stats, canonical_stats
)
UPDATE repositories r SET
  scan_count = t.scans, last_scanned_at = t.last_scanned, open_findings_count = t.open,
  verified_findings_count = t.verified, status = t.status,
  listing_status = CASE WHEN r.listing_status = 'pending' AND t.scans > 0 THEN 'listed' ELSE r.listing_status END,
  updated_at = now()
FROM target t
WHERE r.id = :repository_id
  AND (r.scan_count, r.last_scanned_at, r.open_findings_count, r.verified_findings_count, r.status,
       r.listing_status)
      IS DISTINCT FROM (t.scans, t.last_scanned, t.open, t.verified, t.status,
                        CASE WHEN r.listing_status = 'pending' AND t.scans > 0 THEN 'listed' ELSE r.listing_status END)
RETURNING r.listing_status
""")
_RECALCULATE = RECALCULATE.statement()
_LOCK_LISTING = Fragment("SELECT listing_status FROM repositories WHERE id = :repository_id FOR UPDATE").statement()


def registry_changed() -> None:
    """Drop the cached registry stats once the current transaction commits, so the next caller waits for the
    recount: moderation actions. Call inside `db.transaction()`."""
    after_commit(invalidate_registry_stats)


def registry_counts_moved() -> None:
    """Counts moved in a stream of writes (a repository registered; a report, check or confirmation): after commit
    the cached stats age out at most once per TTL and are recounted behind the next caller, so neither a burst of
    registrations nor a steady report stream turns home pages into recounts (one TTL and one recount stale at
    most). Call inside `db.transaction()`."""
    after_commit(invalidate_registry_stats_throttled)


async def recalculate_repository_metrics(
    session: AsyncSession, repository_id: int, *, locked_listing: str | None = None
) -> tuple[str, str]:
    """§1.7 over public and public_summary reports: scan_count, last_scanned_at, open/verified counts, status, and
    the pending → listed promotion. Returns (listing before, listing after); a changed listing marks the
    repository's keys dirty (delist-safe) in this same transaction. `locked_listing`: the listing a caller that
    holds the row locked (FOR UPDATE) read, so it is not read again."""
    before = locked_listing
    if before is None:
        before = (await session.execute(_LOCK_LISTING, {"repository_id": repository_id})).scalar_one()
    after = (await session.execute(_RECALCULATE, {"repository_id": repository_id})).scalar_one_or_none()
    after = before if after is None else after
    if after != before:
        await mark_repository_dirty(session, repository_id, "listing_change")
    registry_counts_moved()
    return str(before), str(after)
