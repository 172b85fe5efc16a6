"""`assimilate_scan`: link a new report's occurrences to their canonical findings, in the submit transaction
(docs/domain.md §2.6; `updated_at` moves only on a real change, §2.7)."""

from __future__ import annotations

from sqlalchemy import RowMapping, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.kernel.outbox import mark_dirty
from app.reports.finding_memory import fingerprint, legacy_fingerprint, pattern_key
from app.reports.models import Scan
from app.reports.quorum import recompute_canonical_statuses

_OCCURRENCES = """
SELECT id, file_path, line_start, line_end, severity, title, description, disposition
FROM scan_findings WHERE scan_id = :scan_id ORDER BY position, id
"""

# the canonicals already known by any of the given fingerprints (v2, or v1 for the legacy upgrade): one query
# per report, whatever its number of findings
_FIND = """
SELECT fingerprint, id, status FROM canonical_findings
WHERE repository_id = :repository_id AND fingerprint = ANY(CAST(:fingerprints AS text[]))
"""

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
# (updated_at untouched), and RETURNING re-reads the row either way. One statement for all of a report's new
# canonicals, inserted in position order (distinct fingerprints: one row may not be touched twice).
_INSERT = """
INSERT INTO canonical_findings AS c
  (repository_id, fingerprint, pattern_key, file_path, line_start, line_end, severity, title, description,
   status, first_seen_commit_sha, last_seen_commit_sha)
SELECT :repository_id, n.fingerprint, n.pattern_key, n.file_path, n.line_start, n.line_end, n.severity, n.title,
       n.description, 'open', :commit_sha, :commit_sha
FROM unnest(CAST(:fingerprints AS text[]), CAST(:pattern_keys AS text[]), CAST(:file_paths AS text[]),
            CAST(:line_starts AS integer[]), CAST(:line_ends AS integer[]), CAST(:severities AS text[]),
            CAST(:titles AS text[]), CAST(:descriptions AS text[]))
     WITH ORDINALITY AS n(fingerprint, pattern_key, file_path, line_start, line_end, severity, title, description, pos)
ORDER BY n.pos
ON CONFLICT (repository_id, fingerprint) DO UPDATE SET pattern_key = EXCLUDED.pattern_key
RETURNING c.fingerprint, c.id, c.status
"""

# how many reports already carry each canonical (this report's occurrences are not linked yet)
_PRIOR = """
SELECT canonical_finding_id, count(DISTINCT scan_id) FROM scan_findings
WHERE canonical_finding_id = ANY(CAST(:ids AS bigint[])) GROUP BY canonical_finding_id
"""

_LINK = """
UPDATE scan_findings f SET canonical_finding_id = v.canonical_id, fingerprint = v.fingerprint,
  disposition = v.disposition, updated_at = now()
FROM unnest(CAST(:ids AS bigint[]), CAST(:canonical_ids AS bigint[]), CAST(:fingerprints AS text[]),
            CAST(:dispositions AS text[])) AS v(id, canonical_id, fingerprint, disposition)
WHERE f.id = v.id
"""

# per canonical of `:ids`; a canonical without occurrences keeps its counters
_REFRESH_COUNTERS = """
WITH occ AS (
  SELECT f.canonical_finding_id AS canonical_id, f.id, f.scan_id, s.submitted_by_id, s.model, s.commit_sha,
         s.inserted_at
  FROM scan_findings f JOIN scans s ON s.id = f.scan_id WHERE f.canonical_finding_id = ANY(CAST(:ids AS bigint[]))
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
    return await refresh_counters_of(session, [canonical_id]) > 0


async def refresh_counters_of(session: AsyncSession, canonical_ids: list[int]) -> int:
    """`refresh_canonical_counters` of many canonicals in one statement; returns how many changed."""
    result = await session.execute(text(_REFRESH_COUNTERS), {"ids": canonical_ids})
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


async def _known(session: AsyncSession, repository_id: int, fingerprints: set[str]) -> dict[str, tuple[int, str]]:
    rows = await session.execute(text(_FIND), {"repository_id": repository_id, "fingerprints": sorted(fingerprints)})
    return {str(fp): (int(cid), str(status)) for fp, cid, status in rows}


async def assimilate_scan(session: AsyncSession, scan: Scan) -> set[str]:
    """Assimilate every occurrence of `scan` in position order; returns the pattern keys touched.

    A fixed number of statements per report, whatever its number of findings (a 200-finding report is one
    request's work, docs/security.md): the known canonicals in one read, the new ones in one insert, the links in
    one update; only a legacy v1 upgrade (old data, rare) costs a statement of its own."""
    occurrences = (await session.execute(text(_OCCURRENCES), {"scan_id": scan.id})).mappings().all()
    if not occurrences:
        return set()
    prints = [fingerprint(o["file_path"], o["line_start"], o["title"]) for o in occurrences]
    legacies = [legacy_fingerprint(o["file_path"], o["line_start"], o["line_end"], o["title"]) for o in occurrences]
    known = await _known(session, scan.repository_id, {*prints, *legacies})
    resolved: dict[str, tuple[int, str]] = {}  # v2 fingerprint -> (canonical id, status)
    new: dict[str, RowMapping] = {}  # v2 fingerprint -> its first occurrence, to insert
    rekeyed: set[str] = set()  # keys a v1 upgrade moved a canonical away from
    for occ, fp, legacy in zip(occurrences, prints, legacies, strict=True):
        if fp in resolved or fp in new:
            continue
        if fp in known:
            resolved[fp] = known[fp]
            continue
        row = None
        if legacy in known:
            params = {"repository_id": scan.repository_id, "fingerprint": fp, "legacy": legacy}
            row = (
                await session.execute(text(_UPGRADE_LEGACY), {**params, "pattern_key": pattern_key(occ["title"])})
            ).first()
        if row is None:
            new[fp] = occ
            continue
        known.pop(legacy)  # re-keyed: a later occurrence cannot upgrade it again
        resolved[fp] = (int(row[0]), str(row[1]))
        if row[2] and row[2] != pattern_key(occ["title"]):
            rekeyed.add(str(row[2]))
    if new:
        rows = await session.execute(
            text(_INSERT),
            {
                "repository_id": scan.repository_id,
                "commit_sha": scan.commit_sha,
                "fingerprints": list(new),
                "pattern_keys": [pattern_key(o["title"]) for o in new.values()],
                "file_paths": [o["file_path"] for o in new.values()],
                "line_starts": [o["line_start"] for o in new.values()],
                "line_ends": [o["line_end"] for o in new.values()],
                "severities": [o["severity"] for o in new.values()],
                "titles": [o["title"] for o in new.values()],
                "descriptions": [o["description"] for o in new.values()],
            },
        )
        resolved.update({str(fp): (int(cid), str(status)) for fp, cid, status in rows})
    touched = sorted({cid for cid, _ in resolved.values()})
    prior = {int(cid): int(n) for cid, n in await session.execute(text(_PRIOR), {"ids": touched})}
    # §2.6 step 4 in position order: an earlier occurrence of this report already counts as a prior report
    seen: set[int] = set()
    dispositions: list[str] = []
    for occ, fp in zip(occurrences, prints, strict=True):
        canonical_id, status = resolved[fp]
        earlier = prior.get(canonical_id, 0) + (1 if canonical_id in seen else 0)
        dispositions.append(disposition_for(earlier, status, str(occ["disposition"])))
        seen.add(canonical_id)
    await session.execute(
        text(_LINK),
        {
            "ids": [o["id"] for o in occurrences],
            "canonical_ids": [resolved[fp][0] for fp in prints],
            "fingerprints": prints,
            "dispositions": dispositions,
        },
    )
    await refresh_counters_of(session, touched)
    await recompute_canonical_statuses(session, touched)
    # the old key of a re-keyed canonical is dirtied in this transaction, or it would keep the canonical's instance
    # until the nightly reconcile (docs/domain.md §5.6)
    await mark_dirty(session, rekeyed, "assimilate", repository_id=scan.repository_id)
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
