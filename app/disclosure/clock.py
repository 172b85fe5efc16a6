"""The clock that publishes (docs/domain.md "Coordinated disclosure"): every embargo whose deadline passed is
published through the same path as any publication (`app.reports.embargo.publish_embargoed`: the feed's
`finding.published`, dirty keys, metrics, webhooks, the purge), by the worker every minute
(`jobs/worker.py` `disclosure_clock_job`) or by `tarakan disclosures publish-due`. The clock's publications are not
audit events (an audit event drops every cache): each is a `disclosures` row's `published_because = 'deadline'`."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text

from app.kernel import db
from app.kernel.metrics import DISCLOSURE_PUBLISH_LATENESS
from app.reports.embargo import publish_embargoed

log = logging.getLogger(__name__)

BATCH = 100  # embargoes published in one transaction
DEADLINE = "deadline"

# Locks in the report path's order (its repository row, then the `disclosures` row its embargo statement meets):
# the repositories with a due embargo first, skipping those a report or another worker holds (the next run takes
# them), then their due embargoes with their canonicals, skipping one a check or a person's change of its clock
# holds (they lock the canonical, then the repository: waiting on it here could deadlock). `:now` NULL is the
# database's time.
_LOCK_REPOSITORIES = text("""
SELECT r.id FROM repositories r
WHERE r.id IN (SELECT d.repository_id FROM disclosures d
               WHERE d.state = 'embargoed' AND d.deadline <= coalesce(CAST(:now AS timestamptz), now())
               ORDER BY d.deadline LIMIT :batch)
ORDER BY r.id
FOR UPDATE SKIP LOCKED
""")
_DUE = text("""
SELECT d.canonical_finding_id, EXTRACT(EPOCH FROM now() - d.deadline) AS late
FROM disclosures d JOIN canonical_findings c ON c.id = d.canonical_finding_id
WHERE d.state = 'embargoed' AND d.deadline <= coalesce(CAST(:now AS timestamptz), now())
  AND d.repository_id = ANY(CAST(:repositories AS bigint[]))
ORDER BY d.deadline, d.canonical_finding_id
LIMIT :batch
FOR UPDATE OF d, c SKIP LOCKED
""")


@dataclass(frozen=True)
class _Batch:
    published: list[int]
    late: dict[int, float]  # seconds past its deadline, by canonical id (negative: published early by `--now`)


async def _publish_batch(now: datetime | None) -> _Batch | None:
    """One transaction: at most BATCH due embargoes published (None: nothing due that is not locked)."""
    async with db.transaction() as session:
        params = {"now": now, "batch": BATCH}
        repositories = [int(r) for r in (await session.execute(_LOCK_REPOSITORIES, params)).scalars()]
        if not repositories:
            return None
        due = (await session.execute(_DUE, {**params, "repositories": repositories})).all()
        if not due:
            return None
        published = await publish_embargoed(session, [int(r.canonical_finding_id) for r in due], DEADLINE)
        return _Batch(published, {int(r.canonical_finding_id): float(r.late) for r in due})


async def publish_due(now: datetime | None = None) -> int:
    """Publish every embargo whose deadline is at or before `now` (None: the database's now), in batches of one
    transaction each; `published_at` is the real time whatever `now` says. How many were published."""
    total = 0
    while True:
        batch = await _publish_batch(now)
        if batch is None:
            break
        for canonical_id in batch.published:  # counted once committed
            DISCLOSURE_PUBLISH_LATENESS.observe(max(0.0, batch.late[canonical_id]))
        total += len(batch.published)
        if len(batch.late) < BATCH:
            break
    if total:
        log.info("disclosure clock: %d embargoed finding(s) published at their deadline", total)
    return total
