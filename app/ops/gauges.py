"""Gauges read from the database at scrape time (docs/operations.md "Metrics"): facts about the fleet, not about
one process, so the web process reports them on /metrics and every instance reports the same value (alert
rules take the max over instances).

One round trip per scrape, on the primary (the backlog must not lag behind a replica). The dirty-keys table is tiny
while the workers keep up; min/max(refreshed_at) read one end of `infestation_patterns_refreshed_at_idx`.
"""

from __future__ import annotations

from sqlalchemy import text

from app.kernel import db
from app.kernel.metrics import (
    DIRTY_BACKLOG,
    DIRTY_OLDEST_AGE,
    JOB_LAST_SUCCESS,
    NEWEST_REFRESHED_AGE,
    OLDEST_REFRESHED_AGE,
)

# the fleet-wide jobs of jobs/worker.py as recorded in job_runs (the lease names): hourly and nightly
FLEET_JOBS = ("recompute_windows", "reconcile")

_GAUGES_SQL = """
SELECT
  (SELECT count(*) FROM infestation_dirty_keys) AS backlog,
  (SELECT EXTRACT(EPOCH FROM now() - min(first_dirtied_at)) FROM infestation_dirty_keys) AS oldest_dirty,
  (SELECT EXTRACT(EPOCH FROM now() - max(refreshed_at)) FROM infestation_patterns) AS newest_refresh,
  (SELECT EXTRACT(EPOCH FROM now() - min(refreshed_at)) FROM infestation_patterns) AS oldest_refresh
"""

_JOB_RUNS_SQL = """
SELECT name, EXTRACT(EPOCH FROM finished_at) AS finished
FROM job_runs WHERE name = ANY(CAST(:names AS text[])) AND finished_at IS NOT NULL
"""


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
    for name, finished in runs:
        JOB_LAST_SUCCESS.labels(job=name).set(float(finished))
