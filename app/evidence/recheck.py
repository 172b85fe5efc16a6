"""The worker's re-check of pending evidence (docs/domain.md "Evidence at the commit"): due reports claimed a few at
a time, checked at the forge outside any transaction, then published (`publish.publish_decided`) or rescheduled
with backoff (30 s doubling to 1 h); past 7 days what is still undecided expires, never public."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text

from app.evidence.publish import Decision, publish_decided
from app.forge import api as forge
from app.kernel import db

log = logging.getLogger(__name__)

BATCH = 16  # reports claimed per run
CONCURRENCY = 4  # reports checked at once (each within its own deadline)
DEADLINE_SECONDS = 10.0  # per report
LEASE = timedelta(minutes=2)  # a claimed report is not claimed again meanwhile (a crashed run's comes back)
FIRST_BACKOFF_SECONDS, LAST_BACKOFF_SECONDS = 30, 3600
EXPIRY = timedelta(days=7)

# Due pending reports, oldest due first; SKIP LOCKED and the lease keep two runs off the same report.
_CLAIM = text("""
UPDATE scans s SET evidence_next_at = CAST(:lease_until AS timestamptz)
FROM (SELECT id FROM scans WHERE evidence_next_at <= CAST(:now AS timestamptz) AND published_at IS NULL
      ORDER BY evidence_next_at, id LIMIT :limit FOR UPDATE SKIP LOCKED) due
WHERE s.id = due.id
RETURNING s.id
""")
_PENDING = text("""
SELECT s.id AS scan_id, s.commit_sha, s.inserted_at, s.evidence_attempts, r.id AS repository_id, r.host, r.owner,
       r.name, r.default_branch, f.id, f.file_path, f.line_start, f.line_end
FROM scans s JOIN repositories r ON r.id = s.repository_id
LEFT JOIN scan_findings f ON f.scan_id = s.id AND f.evidence_state = 'pending'
WHERE s.id = :scan_id AND s.published_at IS NULL
ORDER BY f.position, f.id
""")
_RESCHEDULE = text("""
UPDATE scans SET evidence_attempts = evidence_attempts + 1,
  evidence_next_at = CAST(:now AS timestamptz) + make_interval(secs => :wait), updated_at = now()
WHERE id = :scan_id AND published_at IS NULL
""")


@dataclass
class Rechecked:
    published: list[int] = field(default_factory=list)
    rescheduled: list[int] = field(default_factory=list)
    expired: list[int] = field(default_factory=list)

    def summary(self) -> dict[str, int]:
        return {"published": len(self.published), "rescheduled": len(self.rescheduled), "expired": len(self.expired)}


def backoff_seconds(attempts: int) -> int:
    """The wait after the `attempts`-th undecided re-check: 30 s doubling, at most 1 h."""
    return min(FIRST_BACKOFF_SECONDS << min(attempts, 12), LAST_BACKOFF_SECONDS)


async def recheck_pending(*, now: datetime | None = None, limit: int = BATCH) -> Rechecked:
    """One run: claim the due pending reports and decide each (`now`: the clock, for tests)."""
    now = now or datetime.now(UTC)
    async with db.transaction() as session:
        params = {"now": now, "lease_until": now + LEASE, "limit": limit}
        claimed = [int(r.id) for r in await session.execute(_CLAIM, params)]
    out = Rechecked()
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(scan_id: int) -> None:
        async with gate:
            try:
                await recheck_report(scan_id, now=now, out=out)
            except Exception:  # one report's failure is not the batch's: it comes back after the lease
                log.exception("evidence re-check of report %s failed", scan_id)

    await asyncio.gather(*(one(scan_id) for scan_id in claimed))
    return out


async def recheck_report(scan_id: int, *, now: datetime, out: Rechecked) -> None:
    """Check one pending report's undecided findings at the forge and act on the answer."""
    from app.reports.evidence import FindingRef, check_evidence  # the gate's check: the same code path

    async with db.read_session(replica=False) as session:
        rows = (await session.execute(_PENDING, {"scan_id": scan_id})).all()
    if not rows:
        return  # published or gone meanwhile
    head = rows[0]
    pending = [r for r in rows if r.id is not None]
    if not forge.evidence_enabled(str(head.host)):  # the gate is off now: published as a report sent with it off
        unchecked = [Decision(int(r.id), "unchecked") for r in pending]
        async with db.transaction() as session:
            if await publish_decided(session, scan_id, unchecked) is not None:
                out.published.append(scan_id)
        return
    result = await check_evidence(
        int(head.repository_id),
        str(head.host),
        str(head.owner),
        str(head.name),
        head.default_branch,
        str(head.commit_sha),
        [FindingRef(r.file_path, r.line_start, r.line_end) for r in pending],
        deadline=time.monotonic() + DEADLINE_SECONDS,
    )
    decisions: list[Decision] = []
    undecided: list[Any] = []
    for row, evidence in zip(pending, result.findings, strict=True):
        if result.commit == "refused":
            decisions.append(Decision(int(row.id), "refused", reason=result.reason))
        elif result.commit == "pending" or evidence.state == "pending":
            undecided.append(row)
        elif evidence.state == "confirmed":
            decisions.append(Decision(int(row.id), "confirmed", anchor=evidence.anchor))
        else:
            decisions.append(Decision(int(row.id), "refused", reason=evidence.reason))
    expired = now - head.inserted_at >= EXPIRY
    if undecided and not expired:
        async with db.transaction() as session:
            wait = backoff_seconds(int(head.evidence_attempts) + 1)
            await session.execute(_RESCHEDULE, {"scan_id": scan_id, "now": now, "wait": wait})
        out.rescheduled.append(scan_id)
        return
    decisions += [Decision(int(r.id), "expired", reason="the forge did not answer within 7 days") for r in undecided]
    async with db.transaction() as session:
        done = await publish_decided(
            session, scan_id, decisions, committed_at=result.committed_at, release_run=bool(undecided)
        )
    if done is not None:
        (out.expired if undecided else out.published).append(scan_id)
