"""Repository metrics (docs/domain.md §1.7), recomputed from the visible reports by the service that changed them, in
its transaction; the reports' tables are only read here."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from app.kernel.aftercommit import after_commit
from app.kernel.sql import Fragment, compose
from app.record.outbox import mark_repository_dirty
from app.registry.stats import invalidate_registry_stats, invalidate_registry_stats_throttled

# The repository row's update from a `target` (scans, last_scanned, open, verified): it returns the listing it set,
# only when a count or the listing moved.
_UPDATE_FROM_TARGET = Fragment("""
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
_STATUS = Fragment("CASE WHEN scans = 0 THEN 'unscanned' WHEN open > 0 THEN 'findings' ELSE 'reviewed' END AS status")

# §1.7 from source: every visible report and canonical of the repository. Also a CTE of the report's last statement
# (app.reports.service), which its sibling CTEs never read: they read no repository row.
RECALCULATE = compose(
    """
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
  SELECT scans, last_scanned, open, verified, {status} FROM scan_stats, canonical_stats
)
{update}""",
    status=_STATUS,
    update=_UPDATE_FROM_TARGET,
)

# The same counts moved by one new report (`:scan_id`) alone, when it changed no canonical's status (every canonical
# it links was created by it or is open without checks: app.reports.service): the stored counts plus the report if
# it is visible, plus each canonical it publishes that no other visible report carried. Its cost is the report's,
# not the repository's history (docs/benchmarks.md "Ingest capacity"); equal to RECALCULATE whenever the stored
# counts were (every other writer recounts from source), which tests/registry/test_repository_metrics.py checks.
COUNT_NEW_REPORT = compose(
    """
WITH new_scan AS (
  SELECT inserted_at FROM scans
  WHERE id = :scan_id AND repository_id = :repository_id AND visibility IN ('public', 'public_summary')
    AND published_at IS NOT NULL
), newly_counted AS (
  SELECT c.status FROM canonical_findings c
  WHERE c.repository_id = :repository_id AND EXISTS (SELECT 1 FROM new_scan)
    AND c.id IN (SELECT f.canonical_finding_id FROM scan_findings f
                 WHERE f.scan_id = :scan_id AND f.published_at IS NOT NULL)
    AND NOT EXISTS (SELECT 1 FROM scan_findings f JOIN scans s ON s.id = f.scan_id
                    WHERE f.canonical_finding_id = c.id AND f.published_at IS NOT NULL AND f.scan_id <> :scan_id
                      AND s.visibility IN ('public', 'public_summary') AND s.published_at IS NOT NULL)
), counted AS (
  SELECT r.scan_count + (SELECT count(*) FROM new_scan) AS scans,
         greatest(r.last_scanned_at, (SELECT inserted_at FROM new_scan)) AS last_scanned,
         r.open_findings_count + (SELECT count(*) FROM newly_counted WHERE status <> 'fixed') AS open,
         r.verified_findings_count + (SELECT count(*) FROM newly_counted WHERE status = 'verified') AS verified
  FROM repositories r WHERE r.id = :repository_id
), target AS (
  SELECT scans, last_scanned, open, verified, {status} FROM counted
)
{update}""",
    status=_STATUS,
    update=_UPDATE_FROM_TARGET,
)
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
