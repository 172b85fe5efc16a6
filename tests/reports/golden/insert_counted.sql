WITH stored AS (
  SELECT id, id IN (
SELECT id FROM scans
WHERE submitted_by_id = :aid AND run_id = :run_id AND repository_id = :rid AND commit_sha = :sha
  AND model IS NOT DISTINCT FROM :model AND prompt_version IS NOT DISTINCT FROM :prompt_version
  AND provenance = :provenance AND review_kind = :review_kind AND notes IS NOT DISTINCT FROM :notes
  AND raw_document = :raw_document AND disclosure_days IS NOT DISTINCT FROM CAST(:disclosure_days AS smallint)
) AS same FROM scans WHERE submitted_by_id = :aid AND run_id = :run_id
), recent AS (SELECT count(*) FILTER (WHERE inserted_at > now() - interval '1 minute') AS per_minute, count(*) FILTER (WHERE inserted_at > now() - interval '1 minute' AND repository_id = :rid) AS per_repo_minute, count(*) AS per_day FROM scans WHERE submitted_by_id = :aid AND inserted_at > now() - interval '1 day'), inserted AS (
INSERT INTO scans (repository_id, submitted_by_id, commit_sha, model, prompt_version, run_id, provenance,
                   review_kind, notes, findings_count, review_status, visibility, raw_document, commit_committed_at,
                   published_at, evidence_next_at, disclosure_days)
VALUES (:rid, :aid, :sha, :model, :prompt_version, :run_id, :provenance, :review_kind, :notes, :findings_count,
        'quarantined', 'public', :raw_document, CAST(:committed_at AS timestamptz),
        CASE WHEN CAST(:pending AS boolean) THEN NULL ELSE now() END,
        CASE WHEN CAST(:pending AS boolean) THEN now() + interval '30 seconds' END, CAST(:disclosure_days AS smallint))
ON CONFLICT (submitted_by_id, run_id) WHERE run_id IS NOT NULL DO NOTHING
RETURNING id
), known AS (
SELECT c.fingerprint, c.id, c.public_id, c.status, c.pattern_key,
       (SELECT count(DISTINCT f.scan_id) FROM scan_findings f
        WHERE f.canonical_finding_id = c.id AND f.published_at IS NOT NULL) AS prior,
       c.status = 'open' AND c.confirmations_count = 0 AND c.disputes_count = 0 AND c.verified_at IS NULL
         AND NOT EXISTS (SELECT 1 FROM canonical_finding_checks ch WHERE ch.canonical_finding_id = c.id) AS unchecked
FROM canonical_findings c
WHERE c.repository_id = :repository_id AND c.fingerprint = ANY(CAST(:fingerprints AS text[]))
)
SELECT (SELECT id FROM inserted) AS scan_id, s.id AS stored_id, s.same, r.per_minute, r.per_repo_minute, r.per_day,
       k.*
FROM recent r LEFT JOIN stored s ON TRUE LEFT JOIN known k ON TRUE
