"""Fleet gauges read from the database at scrape time (docs/operations.md "Metrics")."""

from __future__ import annotations

import time

from sqlalchemy import text

from app.kernel import db
from app.kernel.metrics import (
    DIRTY_BACKLOG,
    DIRTY_OLDEST_AGE,
    DISCLOSURE_OLDEST_OVERDUE,
    EVIDENCE_OLDEST_PENDING_AGE,
    EVIDENCE_PENDING,
    JOB_LAST_SUCCESS,
    NEWEST_REFRESHED_AGE,
    OLDEST_REFRESHED_AGE,
    WEBHOOK_OLDEST_DUE_AGE,
    WEBHOOK_PENDING,
)

# the fleet-wide jobs of jobs/worker.py as recorded in job_runs (the lease names): hourly and nightly; and the last
# drain that refreshed a key (app/infestations/dirty_queue.py: the pipeline-stopped alert's signal)
FLEET_JOBS = ("recompute_windows", "reconcile", "drain")

# the oldest overdue embargo (docs/operations.md "TarakanDisclosureOverdue") reads disclosures_open_deadline_idx;
# pending evidence (docs/operations.md "TarakanEvidencePendingOld"): both read through scans_evidence_due_idx, the
# partial index of reports the worker will re-check, so the scrape stays cheap however many findings are stored
_GAUGES_SQL = """
SELECT
  (SELECT count(*) FROM infestation_dirty_keys) AS backlog,
  (SELECT EXTRACT(EPOCH FROM now() - min(first_dirtied_at)) FROM infestation_dirty_keys) AS oldest_dirty,
  (SELECT EXTRACT(EPOCH FROM now() - max(refreshed_at)) FROM infestation_patterns) AS newest_refresh,
  (SELECT EXTRACT(EPOCH FROM now() - min(refreshed_at)) FROM infestation_patterns) AS oldest_refresh,
  (SELECT count(*) FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
   WHERE d.delivered_at IS NULL AND w.disabled_at IS NULL) AS webhook_pending,
  (SELECT EXTRACT(EPOCH FROM now() - min(next_attempt_at)) FROM webhook_deliveries
   WHERE delivered_at IS NULL AND next_attempt_at <= now()) AS webhook_oldest_due,
  (SELECT count(*) FROM scans s JOIN scan_findings f ON f.scan_id = s.id
   WHERE s.evidence_next_at IS NOT NULL AND f.evidence_state = 'pending') AS evidence_pending,
  (SELECT EXTRACT(EPOCH FROM now() - min(inserted_at)) FROM scans
   WHERE evidence_next_at IS NOT NULL) AS evidence_oldest_pending,
  (SELECT EXTRACT(EPOCH FROM now() - min(deadline)) FROM disclosures
   WHERE state = 'embargoed' AND deadline <= now()) AS disclosure_overdue
"""

_JOB_RUNS_SQL = """
SELECT name, EXTRACT(EPOCH FROM finished_at) AS finished
FROM job_runs WHERE name = ANY(CAST(:names AS text[])) AND finished_at IS NOT NULL
"""


# a scrape reads the database at most this often per process (every scraper, every replica: the gauges are facts
# about the fleet, and a public or misconfigured scraper must not turn /metrics into a query per request);
# read through the module so tests can change it
READ_EVERY_SECONDS = 5.0
_read_at: float | None = None


async def refresh_gauges_at_most_every_interval() -> None:
    """`refresh_gauges` unless this process read them less than READ_EVERY_SECONDS ago (a failed read counts:
    an outage is not retried on every scrape)."""
    global _read_at
    now = time.monotonic()
    if _read_at is not None and now - _read_at < READ_EVERY_SECONDS:
        return
    _read_at = now
    await refresh_gauges()


def forget_readings() -> None:
    """The next scrape reads the database (tests)."""
    global _read_at
    _read_at = None


async def refresh_gauges() -> None:
    """Set every database gauge. Ages are 0 while their table is empty. A job that never finished has no sample
    (its alert uses absent(), docs/operations.md "JobNotRun")."""
    async with db.read_session(replica=False) as session:
        row = (await session.execute(text(_GAUGES_SQL))).one()
        runs = (await session.execute(text(_JOB_RUNS_SQL), {"names": list(FLEET_JOBS)})).all()
    DIRTY_BACKLOG.set(float(row.backlog))
    DIRTY_OLDEST_AGE.set(float(row.oldest_dirty or 0))
    NEWEST_REFRESHED_AGE.set(float(row.newest_refresh or 0))
    OLDEST_REFRESHED_AGE.set(float(row.oldest_refresh or 0))
    WEBHOOK_PENDING.set(float(row.webhook_pending))
    WEBHOOK_OLDEST_DUE_AGE.set(float(row.webhook_oldest_due or 0))
    EVIDENCE_PENDING.set(float(row.evidence_pending))
    EVIDENCE_OLDEST_PENDING_AGE.set(float(row.evidence_oldest_pending or 0))
    DISCLOSURE_OLDEST_OVERDUE.set(float(row.disclosure_overdue or 0))
    for name, finished in runs:
        JOB_LAST_SUCCESS.labels(fleet_job=name).set(float(finished))
    await db.probe_replica()  # tarakan_replica_lag_seconds (a replica that does not answer leaves it as it was)
