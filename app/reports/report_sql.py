"""The statements a report's transaction runs to insert it (`service.store_report`), composed with the §9 counts of
`policy` and the known canonicals of `assimilation`; their rendering, and that of the last statement
(`app.record.outbox.settle_new_report`), is checked in as `tests/reports/golden/*.sql`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Row, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.kernel.sql import Fragment, statement
from app.reports.assimilation import FIND_KNOWN, finding_arrays
from app.reports.policy import RECENT_REPORTS
from app.reports.validation import FindingInput, ReportInput

# What makes a second submission of a run "the same report": the retry of a request whose answer was lost (an
# outage at commit time), answered with the stored report instead of a 422 (docs/reliability.md "Retries").
_SAME_RUN = Fragment("""
SELECT id FROM scans
WHERE submitted_by_id = :aid AND run_id = :run_id AND repository_id = :rid AND commit_sha = :sha
  AND model IS NOT DISTINCT FROM :model AND prompt_version IS NOT DISTINCT FROM :prompt_version
  AND provenance = :provenance AND review_kind = :review_kind AND notes IS NOT DISTINCT FROM :notes
  AND raw_document = :raw_document AND disclosure_days IS NOT DISTINCT FROM CAST(:disclosure_days AS smallint)
""")

# A new report's row; the same run_id stored by this account (a retry, or a concurrent request) inserts nothing
_INSERT_SCAN = Fragment("""
INSERT INTO scans (repository_id, submitted_by_id, commit_sha, model, prompt_version, run_id, provenance,
                   review_kind, notes, findings_count, review_status, visibility, raw_document, commit_committed_at,
                   published_at, evidence_next_at, disclosure_days)
VALUES (:rid, :aid, :sha, :model, :prompt_version, :run_id, :provenance, :review_kind, :notes, :findings_count,
        'quarantined', 'public', :raw_document, CAST(:committed_at AS timestamptz),
        CASE WHEN CAST(:pending AS boolean) THEN NULL ELSE now() END,
        CASE WHEN CAST(:pending AS boolean) THEN now() + interval '30 seconds' END, CAST(:disclosure_days AS smallint))
ON CONFLICT (submitted_by_id, run_id) WHERE run_id IS NOT NULL DO NOTHING
RETURNING id
""")

# `EXEMPT_INSERT_SCAN` with what a quota-counted account's report must know first, in the snapshot the insert
# reads: the stored report of its run (and whether it is the same report: `_SAME_RUN`) and its §9 counts (before
# this insert)
COUNTED_INSERT_SCAN = statement(
    """
WITH stored AS (
  SELECT id, id IN ({same_run}) AS same FROM scans WHERE submitted_by_id = :aid AND run_id = :run_id
), recent AS ({recent}), inserted AS ({insert}), known AS ({known})
SELECT (SELECT id FROM inserted) AS scan_id, s.id AS stored_id, s.same, r.per_minute, r.per_repo_minute, r.per_day,
       k.*
FROM recent r LEFT JOIN stored s ON TRUE LEFT JOIN known k ON TRUE
""",
    same_run=_SAME_RUN,
    recent=RECENT_REPORTS,
    insert=_INSERT_SCAN,
    known=FIND_KNOWN,
)
# A new report's row (`_INSERT_SCAN`) and the canonicals known by the report's fingerprints (`FIND_KNOWN`), for a
# quota-exempt account
EXEMPT_INSERT_SCAN = statement(
    """
WITH inserted AS ({insert}), known AS ({known})
SELECT i.scan_id, k.* FROM (SELECT (SELECT id FROM inserted) AS scan_id) i LEFT JOIN known k ON TRUE
""",
    insert=_INSERT_SCAN,
    known=FIND_KNOWN,
)

# verified_at of a new report whose every canonical meets quorum at its commit (§1.5; it has no confirmations yet)
VERIFY_SCAN = text("UPDATE scans SET verified_at = now() WHERE id = :id")

# the stored scan of this account's run, and whether it is the same report (`_SAME_RUN`'s test)
STORED_RUN = statement(
    "SELECT id, id IN ({same_run}) AS same FROM scans WHERE submitted_by_id = :aid AND run_id = :run_id",
    same_run=_SAME_RUN,
)


# A pending report's findings (its evidence undecided): stored unlinked and unpublished, as sent (the disposition
# sent is the hint `assimilate_scan` reads when the worker links them), in position order
INSERT_PENDING_FINDINGS = text("""
INSERT INTO scan_findings
  (scan_id, position, file_path, line_start, line_end, severity, title, description, disposition,
   claimed_canonical_public_id, partial_fingerprints, evidence_state, anchor, rule_id, published_at)
SELECT :scan_id, n.position, n.file_path, n.line_start, n.line_end, n.severity, n.title, n.description,
       n.disposition, n.claimed, n.partials, 'pending', n.anchor, n.rule_id, NULL
FROM unnest(CAST(:positions AS integer[]), CAST(:file_paths AS text[]), CAST(:line_starts AS integer[]),
            CAST(:line_ends AS integer[]), CAST(:severities AS text[]), CAST(:titles AS text[]),
            CAST(:descriptions AS text[]), CAST(:dispositions AS text[]), CAST(:claimed AS uuid[]),
            CAST(:partials AS jsonb[]), CAST(:anchors AS text[]), CAST(:rule_ids AS text[]))
     WITH ORDINALITY AS n(position, file_path, line_start, line_end, severity, title, description, disposition,
                          claimed, partials, anchor, rule_id, ord)
ORDER BY n.ord
RETURNING id, public_id
""")


async def store_pending(session: AsyncSession, scan_id: int, report: ReportInput) -> Sequence[Row[Any]]:
    """A pending report's findings stored (`INSERT_PENDING_FINDINGS`): their (id, public_id) rows, in order."""
    return (await session.execute(INSERT_PENDING_FINDINGS, _pending_values(scan_id, report.findings))).all()


def _pending_values(scan_id: int, findings: Sequence[FindingInput]) -> dict[str, Any]:
    return {**finding_arrays(findings), "scan_id": scan_id, "dispositions": [f.disposition for f in findings]}


def scan_values(
    account_id: int,
    repository_id: int,
    report: ReportInput,
    *,
    pending: bool = False,
    committed_at: datetime | None = None,
) -> dict[str, Any]:
    """A report's scan parameters; `pending`: its evidence is undecided (stored unpublished, due for a re-check)."""
    return {
        "pending": pending,
        "committed_at": committed_at,
        "aid": account_id,
        "rid": repository_id,
        "sha": report.commit_sha,
        "model": report.model,
        "prompt_version": report.prompt_version,
        "run_id": report.run_id,
        "provenance": report.provenance,
        "review_kind": report.review_kind,
        "notes": report.notes,
        "findings_count": len(report.findings),
        "raw_document": report.raw_document,
        "disclosure_days": report.disclosure_days,
    }
