"""A canonical finding's counters (detections, distinct submitters and models, first and last seen commit), counted
again from its published occurrences over all visibilities (docs/domain.md §2): one a gate holds back counts once
it is published."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from app.kernel.sql import Fragment

# per canonical of `:ids`; a canonical without occurrences keeps its counters. Also a CTE of a new report's last
# statement (`Assimilated.counters_due`): no sibling there reads a counter
REFRESH_COUNTERS = Fragment("""
WITH occ AS (
  SELECT f.canonical_finding_id AS canonical_id, f.id, f.scan_id, s.submitted_by_id, s.model, s.commit_sha,
         s.inserted_at
  FROM scan_findings f JOIN scans s ON s.id = f.scan_id
  WHERE f.canonical_finding_id = ANY(CAST(:ids AS bigint[])) AND f.published_at IS NOT NULL
), stats AS (
  SELECT canonical_id, count(DISTINCT scan_id) AS detections, count(DISTINCT submitted_by_id) AS submitters,
         count(DISTINCT model) AS models,
         (array_agg(commit_sha ORDER BY inserted_at, id))[1] AS first_commit,
         (array_agg(commit_sha ORDER BY inserted_at DESC, id DESC))[1] AS last_commit
  FROM occ GROUP BY canonical_id
)
UPDATE canonical_findings c SET
  detections_count = stats.detections, distinct_submitters_count = stats.submitters,
  distinct_models_count = stats.models, first_seen_commit_sha = stats.first_commit,
  last_seen_commit_sha = stats.last_commit, updated_at = now()
FROM stats
WHERE c.id = stats.canonical_id
  AND (c.detections_count, c.distinct_submitters_count, c.distinct_models_count,
       c.first_seen_commit_sha, c.last_seen_commit_sha)
      IS DISTINCT FROM (stats.detections, stats.submitters, stats.models, stats.first_commit, stats.last_commit)
""")
_REFRESH_COUNTERS = REFRESH_COUNTERS.statement()


async def refresh_canonical_counters(session: AsyncSession, canonical_id: int) -> bool:
    """Detections, distinct submitters/models, first/last seen commit over ALL visibilities. Returns changed."""
    return await refresh_counters_of(session, [canonical_id]) > 0


async def refresh_counters_of(session: AsyncSession, canonical_ids: list[int]) -> int:
    """`refresh_canonical_counters` of many canonicals in one statement; returns how many changed."""
    result = await session.execute(_REFRESH_COUNTERS, {"ids": canonical_ids})
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
