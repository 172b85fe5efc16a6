"""`assimilate_scan` (docs/domain.md §2.6): link each occurrence of a new report to its repository-level canonical
finding, compute its disposition, refresh the touched canonicals' counters, then their quorum status.

Runs inside the submit transaction. Every UPDATE of a canonical is guarded with IS DISTINCT FROM so that
`updated_at` moves only when a value really changes (§2.7): it drives every infestation window.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.kernel.outbox import mark_dirty
from app.reports.finding_memory import fingerprint, legacy_fingerprint, pattern_key
from app.reports.models import Scan
from app.reports.quorum import recompute_canonical_status

_OCCURRENCES = """
SELECT id, file_path, line_start, line_end, severity, title, description, disposition
FROM scan_findings WHERE scan_id = :scan_id ORDER BY position, id
"""

_FIND = "SELECT id, status FROM canonical_findings WHERE repository_id = :repository_id AND fingerprint = :fingerprint"

# legacy v1 upgrade: re-key the canonical to the v2 fingerprint and pattern key (a real change: bumps updated_at);
# returns the key it had, which must be recounted too
_UPGRADE_LEGACY = """
UPDATE canonical_findings c SET fingerprint = :fingerprint, pattern_key = :pattern_key, updated_at = now()
FROM (SELECT id, pattern_key FROM canonical_findings
      WHERE repository_id = :repository_id AND fingerprint = :legacy ORDER BY id LIMIT 1 FOR UPDATE) old
WHERE c.id = old.id
RETURNING c.id, c.status, old.pattern_key AS old_key
"""

# ON CONFLICT survives a concurrent insert of the same canonical; that path replaces only pattern_key
# (updated_at untouched), and RETURNING re-reads the row either way.
_INSERT = """
INSERT INTO canonical_findings AS c
  (repository_id, fingerprint, pattern_key, file_path, line_start, line_end, severity, title, description,
   status, first_seen_commit_sha, last_seen_commit_sha)
VALUES (:repository_id, :fingerprint, :pattern_key, :file_path, :line_start, :line_end, :severity, :title,
        :description, 'open', :commit_sha, :commit_sha)
ON CONFLICT (repository_id, fingerprint) DO UPDATE SET pattern_key = EXCLUDED.pattern_key
RETURNING c.id, c.status
"""

_PRIOR = "SELECT count(DISTINCT scan_id) FROM scan_findings WHERE canonical_finding_id = :canonical_id"

_LINK = """
UPDATE scan_findings SET canonical_finding_id = :canonical_id, fingerprint = :fingerprint,
  disposition = :disposition, updated_at = now()
WHERE id = :id
"""

_REFRESH_COUNTERS = """
WITH occ AS (
  SELECT f.id, f.scan_id, s.submitted_by_id, s.model, s.commit_sha, s.inserted_at
  FROM scan_findings f JOIN scans s ON s.id = f.scan_id WHERE f.canonical_finding_id = :id
), stats AS (
  SELECT count(DISTINCT scan_id) AS detections, count(DISTINCT submitted_by_id) AS submitters,
         count(DISTINCT model) AS models,
         (SELECT commit_sha FROM occ ORDER BY inserted_at, id LIMIT 1) AS first_commit,
         (SELECT commit_sha FROM occ ORDER BY inserted_at DESC, id DESC LIMIT 1) AS last_commit
  FROM occ
)
UPDATE canonical_findings c SET
  detections_count = stats.detections, distinct_submitters_count = stats.submitters,
  distinct_models_count = stats.models, first_seen_commit_sha = stats.first_commit,
  last_seen_commit_sha = stats.last_commit, updated_at = now()
FROM stats
WHERE c.id = :id AND stats.first_commit IS NOT NULL
  AND (c.detections_count, c.distinct_submitters_count, c.distinct_models_count,
       c.first_seen_commit_sha, c.last_seen_commit_sha)
      IS DISTINCT FROM (stats.detections, stats.submitters, stats.models, stats.first_commit, stats.last_commit)
"""


def disposition_for(prior_scans: int, canonical_status: str, sent: str) -> str:
    """§2.6 step 4: the server decides; only an agent-sent `regression` on a known finding survives."""
    if prior_scans == 0:
        return "new"
    if canonical_status == "fixed" or sent == "regression":
        return "regression"
    return "matches_existing"


async def refresh_canonical_counters(session: AsyncSession, canonical_id: int) -> bool:
    """Detections, distinct submitters/models, first/last seen commit over ALL visibilities. Returns changed."""
    result = await session.execute(text(_REFRESH_COUNTERS), {"id": canonical_id})
    return bool(result.rowcount)  # type: ignore[attr-defined]


async def assimilate_scan(session: AsyncSession, scan: Scan) -> set[str]:
    """Assimilate every occurrence of `scan` in position order; returns the pattern keys touched."""
    occurrences = (await session.execute(text(_OCCURRENCES), {"scan_id": scan.id})).mappings().all()
    touched: list[int] = []
    rekeyed: set[str] = set()  # keys a v1 upgrade moved a canonical away from
    for occ in occurrences:
        fp = fingerprint(occ["file_path"], occ["line_start"], occ["title"])
        key = pattern_key(occ["title"])
        params = {"repository_id": scan.repository_id, "fingerprint": fp}
        row = (await session.execute(text(_FIND), params)).first()
        if row is None:
            legacy = legacy_fingerprint(occ["file_path"], occ["line_start"], occ["line_end"], occ["title"])
            row = (
                await session.execute(text(_UPGRADE_LEGACY), {**params, "pattern_key": key, "legacy": legacy})
            ).first()
            if row is not None and row[2] and row[2] != key:
                rekeyed.add(str(row[2]))
        if row is None:
            row = (
                await session.execute(
                    text(_INSERT),
                    {
                        **params,
                        "pattern_key": key,
                        "file_path": occ["file_path"],
                        "line_start": occ["line_start"],
                        "line_end": occ["line_end"],
                        "severity": occ["severity"],
                        "title": occ["title"],
                        "description": occ["description"],
                        "commit_sha": scan.commit_sha,
                    },
                )
            ).one()
        canonical_id, status = int(row[0]), str(row[1])
        prior = int((await session.execute(text(_PRIOR), {"canonical_id": canonical_id})).scalar_one())
        disposition = disposition_for(prior, status, str(occ["disposition"]))
        await session.execute(
            text(_LINK), {"canonical_id": canonical_id, "fingerprint": fp, "disposition": disposition, "id": occ["id"]}
        )
        if canonical_id not in touched:
            touched.append(canonical_id)
    for canonical_id in sorted(touched):
        await refresh_canonical_counters(session, canonical_id)
        await recompute_canonical_status(session, canonical_id)
    # the old key of a re-keyed canonical is dirtied in this transaction, or it would keep the canonical's instance
    # until the nightly reconcile (docs/domain.md §5.6)
    await mark_dirty(session, rekeyed, "assimilate")
    if not touched:
        return set()
    keys = (
        await session.execute(
            text(
                "SELECT DISTINCT pattern_key FROM canonical_findings "
                "WHERE id = ANY(:ids) AND pattern_key IS NOT NULL AND pattern_key <> ''"
            ),
            {"ids": touched},
        )
    ).scalars()
    return {str(k) for k in keys}
