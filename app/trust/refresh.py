"""Keeping earned trust current: the worker's job every few seconds, `tarakan jobs drain`, and the recompute from
source (`tarakan trust recompute`). Each run looks at what moved since the last run began, less `LOOKBACK` (a
transaction that began before that run and committed after it is seen by the next one), records the new
outcomes and stores the signal of every account they moved."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import text

from app.kernel import db
from app.ops.leases import record_job_run
from app.trust.outcomes import record_outcomes
from app.trust.signal import every_account, store_signals

JOB = "trust_refresh"
LOOKBACK = timedelta(minutes=5)  # longer than any statement timeout of a write transaction

_LAST_START = text("SELECT started_at FROM job_runs WHERE name = :name")


async def refresh(holder: str = "cli") -> dict[str, int]:
    """One incremental run (the whole source when no run was recorded yet)."""
    started = db.utcnow()
    async with db.transaction() as session:
        last = (await session.execute(_LAST_START, {"name": JOB})).scalar_one_or_none()
        moved = await record_outcomes(session, None if last is None else last - LOOKBACK)
        changed = await store_signals(session, moved)
    result = {"accounts": len(moved), "signals_changed": changed}
    await record_job_run(JOB, holder, started_at=started, slot=None, result=result)
    return result


async def recompute(holder: str = "cli") -> dict[str, int]:
    """From source: every outcome the source shows that is not recorded yet, and every account's signal again
    (outcomes older than the window drop out of it: the daily pass)."""
    started = db.utcnow()
    async with db.transaction() as session:
        moved = await record_outcomes(session, None)
        accounts = set(moved) | set(await every_account(session))
        changed = await store_signals(session, accounts)
    result = {"accounts": len(accounts), "signals_changed": changed}
    await record_job_run(JOB, holder, started_at=started, slot=None, result=result)
    return result
