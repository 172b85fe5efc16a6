"""What became of each reporter's findings (docs/domain.md "Earned trust"), kept by the worker within seconds of
the fact and recomputable from source like the rollups: `record_outcomes(since)` looks only at what moved since
then, `record_outcomes(None)` at everything. Decisions only, written once (`ON CONFLICT DO NOTHING`): a later report
at a new commit that reopens the status does not undo an outcome.

The subject of a canonical's outcome is its first published report (a duplicate, by anyone, counts nothing); the
rule of each outcome, in the order they are taken:
- verified: the status quorum made it verified or fixed (docs/domain.md §1.5), dated by `verified_at`;
- disputed: at least two counted disputes outnumber the counted confirmations (one reviewer cannot gate anyone),
  dated by the last dispute at that commit;
- withdrawn: a moderator restricted its first report (the audit log), dated by that event;
- refused: an occurrence the evidence check refused or let expire, or a submission it refused at once."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

# `:since` NULL: every canonical, every refused occurrence and every refusal (the recompute from source). Since a
# time, of the canonicals that moved only those a verified or disputed outcome can come from (a report stream moves
# every canonical it touches: at 120 reports/s the lookback held 36,000, each joined to its first report); a
# withdrawal comes from the audit log's branch
_CANONICALS = text("""
WITH touched AS (
  SELECT c.id FROM canonical_findings c
  WHERE CAST(:since AS timestamptz) IS NULL
     OR c.updated_at >= :since AND (c.status IN ('verified', 'fixed') OR c.disputes_count >= 2)
  UNION
  SELECT f.canonical_finding_id FROM audit_events e JOIN scan_findings f ON f.scan_id = CAST(e.subject_id AS bigint)
  WHERE CAST(:since AS timestamptz) IS NOT NULL AND e.inserted_at >= :since AND e.action = 'scan.visibility'
    AND e.subject_type = 'scan' AND e.subject_id ~ '^[0-9]{1,18}$' AND f.canonical_finding_id IS NOT NULL
), firsts AS (
  SELECT DISTINCT ON (f.canonical_finding_id)
         f.canonical_finding_id AS canonical_id, f.rule_id, s.id AS scan_id, s.submitted_by_id AS account_id,
         s.provenance, s.model, s.prompt_version, s.visibility
  FROM scan_findings f JOIN scans s ON s.id = f.scan_id
  WHERE f.canonical_finding_id IN (SELECT id FROM touched) AND f.published_at IS NOT NULL
    AND s.published_at IS NOT NULL
  ORDER BY f.canonical_finding_id, s.inserted_at, s.id, f.id
), decided AS (
  SELECT firsts.*, c.public_id,
         CASE WHEN c.status IN ('verified', 'fixed') AND c.verified_at IS NOT NULL THEN 'verified'
              WHEN c.disputes_count >= 2 AND c.disputes_count > c.confirmations_count THEN 'disputed'
              WHEN withdrawn.at IS NOT NULL THEN 'withdrawn' END AS outcome,
         CASE WHEN c.status IN ('verified', 'fixed') AND c.verified_at IS NOT NULL THEN c.verified_at
              WHEN c.disputes_count >= 2 AND c.disputes_count > c.confirmations_count THEN
                (SELECT max(ch.inserted_at) FROM canonical_finding_checks ch
                 WHERE ch.canonical_finding_id = c.id AND ch.commit_sha = c.last_seen_commit_sha
                   AND ch.verdict = 'disputed')
              ELSE withdrawn.at END AS decided_at,
         c.disputes_count
  FROM firsts JOIN canonical_findings c ON c.id = firsts.canonical_id
  LEFT JOIN LATERAL (
    SELECT max(e.inserted_at) AS at FROM audit_events e
    WHERE e.subject_type = 'scan' AND e.subject_id = CAST(firsts.scan_id AS text) AND e.action = 'scan.visibility'
      AND e.after ->> 'visibility' = 'restricted'
  ) withdrawn ON firsts.visibility = 'restricted'
)
INSERT INTO finding_outcomes AS o
  (canonical_finding_id, account_id, provenance, model, prompt_version, tool, rule_id, outcome, reason, decided_at)
SELECT canonical_id, account_id, provenance, model, prompt_version,
       CASE WHEN rule_id IS NOT NULL THEN model END, rule_id, outcome,
       CASE outcome
         WHEN 'verified' THEN 'finding ' || public_id || ' verified by the reviewers'' quorum'
         WHEN 'disputed' THEN 'finding ' || public_id || ' disputed by ' || disputes_count || ' reviewers'
         ELSE 'finding ' || public_id || ': its report was restricted by a moderator' END,
       coalesce(decided_at, now())
FROM decided WHERE outcome IS NOT NULL
ON CONFLICT (canonical_finding_id) WHERE canonical_finding_id IS NOT NULL DO NOTHING
RETURNING o.account_id
""")

# occurrences the evidence check refused after storing them, or let expire (the worker's re-check)
_OCCURRENCES = text("""
INSERT INTO finding_outcomes AS o
  (scan_finding_id, account_id, provenance, model, prompt_version, tool, rule_id, outcome, reason, decided_at)
SELECT f.id, s.submitted_by_id, s.provenance, s.model, s.prompt_version,
       CASE WHEN f.rule_id IS NOT NULL THEN s.model END, f.rule_id, 'refused',
       'finding ' || f.public_id || ' ' || CASE f.evidence_state WHEN 'expired' THEN 'could not be checked at its commit'
                                              ELSE 'not found at its commit' END
         || coalesce(': ' || left(f.evidence_reason, 200), ''),
       f.updated_at
FROM scan_findings f JOIN scans s ON s.id = f.scan_id
WHERE f.evidence_state IN ('refused', 'expired')
  AND NOT EXISTS (SELECT 1 FROM finding_outcomes x WHERE x.scan_finding_id = f.id)
ON CONFLICT (scan_finding_id) WHERE scan_finding_id IS NOT NULL DO NOTHING
RETURNING o.account_id
""")

# submissions the evidence check refused at once (the refusal log): each counts as one refused finding
_REFUSALS = text("""
INSERT INTO finding_outcomes AS o (refusal_id, account_id, outcome, reason, decided_at)
SELECT r.id, r.account_id, 'refused', 'a report refused at submission: ' || left(r.reason, 200), r.inserted_at
FROM report_refusals r
WHERE (CAST(:since AS timestamptz) IS NULL OR r.inserted_at >= :since)
  AND NOT EXISTS (SELECT 1 FROM finding_outcomes x WHERE x.refusal_id = r.id)
ON CONFLICT (refusal_id) WHERE refusal_id IS NOT NULL DO NOTHING
RETURNING o.account_id
""")


async def record_outcomes(session: AsyncSession, since: datetime | None) -> set[int]:
    """Record the decisions taken since `since` (None: all of them, from source); the accounts they moved."""
    moved: set[int] = set()
    for statement, params in (
        (_CANONICALS, {"since": since}),
        (_OCCURRENCES, {}),
        (_REFUSALS, {"since": since}),
    ):
        moved.update(int(row[0]) for row in await session.execute(statement, params))
    return moved
