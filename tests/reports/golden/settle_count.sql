WITH recount AS (
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
  SELECT scans, last_scanned, open, verified, CASE WHEN scans = 0 THEN 'unscanned' WHEN open > 0 THEN 'findings' ELSE 'reviewed' END AS status FROM counted
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
), 
listed_repository AS (
  INSERT INTO published_repositories AS p (repository_id, listed)
  SELECT CAST(:repository_id AS bigint), TRUE WHERE CAST(:listed AS boolean)
  ON CONFLICT (repository_id) DO UPDATE SET listed = TRUE WHERE NOT p.listed
  RETURNING p.repository_id, p.opaque_id
), repository_key AS (
  SELECT coalesce((SELECT opaque_id FROM listed_repository),
                  (SELECT opaque_id FROM published_repositories WHERE repository_id = :repository_id)) AS opaque_id
), published AS (
  INSERT INTO published_findings (scan_finding_id, public_id, scan_id, repository_id, canonical_id)
  SELECT f.id, f.public_id, f.scan_id, :repository_id, f.canonical_finding_id FROM scan_findings f
  WHERE f.scan_id = :scan_id AND f.canonical_finding_id IS NOT NULL AND f.published_at IS NOT NULL
    AND CAST(:listed AS boolean)
  ORDER BY f.id
  ON CONFLICT (scan_finding_id) DO NOTHING
  RETURNING scan_finding_id, public_id, canonical_id
), statuses AS (
  INSERT INTO published_canonicals AS pc (canonical_id, public_id, repository_id, status)
  SELECT c.id, c.public_id, c.repository_id, c.status FROM canonical_findings c
  WHERE c.id IN (SELECT canonical_finding_id FROM scan_findings WHERE scan_id = :scan_id AND published_at IS NOT NULL)
    AND (CAST(:listed AS boolean) OR EXISTS (SELECT 1 
FROM published_findings AS p 
WHERE p.canonical_id = c.id OFFSET 0))
  ORDER BY c.id
  ON CONFLICT (canonical_id) DO UPDATE SET status = EXCLUDED.status WHERE pc.status <> EXCLUDED.status
  RETURNING pc.canonical_id, pc.public_id, pc.status
), entries AS (
  INSERT INTO changes (kind, finding, canonical, repository_id, repository_key, pattern_key, status)
  SELECT kind, finding, canonical, repository_id, repository_key, pattern_key, status FROM (
    SELECT 1 AS step, repository_id AS n, 'repository.listed' AS kind, CAST(NULL AS uuid) AS finding,
           CAST(NULL AS uuid) AS canonical, repository_id, opaque_id AS repository_key,
           CAST(NULL AS text) AS pattern_key, CAST(NULL AS text) AS status
    FROM listed_repository
    UNION ALL
    SELECT 2, i.scan_finding_id, 'finding.published', i.public_id, c.public_id, CAST(:repository_id AS bigint),
           (SELECT opaque_id FROM repository_key), NULLIF(c.pattern_key, ''), NULL
    FROM published i JOIN canonical_findings c ON c.id = i.canonical_id
    UNION ALL
    SELECT 3, canonical_id, 'finding.status', NULL, public_id, NULL, NULL, NULL, status FROM statuses
  ) e
  ORDER BY step, n
  RETURNING id
), dirty AS (

INSERT INTO infestation_dirty_keys AS d (pattern_key, reason, repository_ids)
SELECT k, :reason, repos FROM (SELECT unnest(CAST(:keys AS text[])), ARRAY[CAST(:repository_id AS bigint)]) AS keys(k, repos)
WHERE k IS NOT NULL AND k <> ''
ORDER BY k
ON CONFLICT (pattern_key) DO UPDATE
  SET version = d.version + 1, dirtied_at = now(), reason = EXCLUDED.reason,
      repository_ids = CASE WHEN d.repository_ids IS NOT NULL AND EXCLUDED.repository_ids IS NOT NULL THEN (
        SELECT CASE WHEN count(DISTINCT r) <= 64 THEN array_agg(DISTINCT r ORDER BY r) END
        FROM unnest(d.repository_ids || EXCLUDED.repository_ids) AS r) END
 RETURNING d.pattern_key
)
SELECT (SELECT listing_status FROM recount) AS listing, (SELECT count(*) FROM entries) AS entries, (SELECT count(*) FROM dirty) AS dirty
