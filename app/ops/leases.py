"""Fleet-wide singletons: a compare-and-swap lease on `instance_leases` and the `job_runs` slot record, so a
scheduled slot runs once (docs/scaling.md "Singletons: leases and slots")."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text

from app.kernel import db

log = logging.getLogger(__name__)

_ACQUIRE = """
INSERT INTO instance_leases AS l (name, holder, expires_at, acquired_at)
VALUES (:name, :holder, now() + make_interval(secs => :ttl), now())
ON CONFLICT (name) DO UPDATE SET
  holder = EXCLUDED.holder,
  expires_at = EXCLUDED.expires_at,
  acquired_at = CASE WHEN l.holder = EXCLUDED.holder THEN l.acquired_at ELSE now() END
WHERE l.expires_at < now() OR l.holder = EXCLUDED.holder
RETURNING holder
"""

_RENEW = """
UPDATE instance_leases SET expires_at = now() + make_interval(secs => :ttl)
WHERE name = :name AND holder = :holder
RETURNING holder
"""

_RELEASE = "DELETE FROM instance_leases WHERE name = :name AND holder = :holder"


def new_worker_id() -> str:
    """A holder / claimer identity that is unique per call and says which process it was."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class LeaseBusy(RuntimeError):
    """Another live holder has the lease."""


class LeaseLost(RuntimeError):
    """The lease was taken over (we failed to renew before expiry); the work under it was cancelled."""


async def acquire(name: str, holder: str, ttl_seconds: float) -> bool:
    """Take the lease if it is free, expired, or already ours (then it is extended)."""
    async with db.transaction() as session:
        row = (await session.execute(text(_ACQUIRE), {"name": name, "holder": holder, "ttl": ttl_seconds})).first()
    return row is not None


async def renew(name: str, holder: str, ttl_seconds: float) -> bool:
    """Extend the lease if we still hold it (compare-and-swap on holder)."""
    async with db.transaction() as session:
        row = (await session.execute(text(_RENEW), {"name": name, "holder": holder, "ttl": ttl_seconds})).first()
    return row is not None


async def release(name: str, holder: str) -> None:
    """Give the lease up; a no-op if someone else holds it now."""
    async with db.transaction() as session:
        await session.execute(text(_RELEASE), {"name": name, "holder": holder})


@dataclass
class Lease:
    name: str
    holder: str
    lost: bool = False


@asynccontextmanager
async def hold_lease(name: str, ttl_seconds: float, *, holder: str | None = None) -> AsyncIterator[Lease]:
    """Hold `name` for the body: renewed every ttl/3 in the background, released at the end.

    Raises LeaseBusy if another holder has it. If renewal fails until the lease could have expired (another
    holder may have taken over), the body is cancelled and LeaseLost is raised: two holders never keep working."""
    me = holder or new_worker_id()
    if not await acquire(name, me, ttl_seconds):
        raise LeaseBusy(name)
    lease = Lease(name, me)
    body = asyncio.current_task()
    assert body is not None

    async def keep_renewing() -> None:
        last_ok = time.monotonic()
        while True:
            await asyncio.sleep(ttl_seconds / 3)
            try:
                if await renew(name, me, ttl_seconds):
                    last_ok = time.monotonic()
                    continue
            except Exception as exc:  # transient: retry until the lease could have expired
                log.warning("renewing lease %s failed: %s", name, exc)
                if time.monotonic() - last_ok < ttl_seconds:
                    continue
            lease.lost = True
            body.cancel()
            return

    renewer = asyncio.create_task(keep_renewing())
    try:
        yield lease
    except asyncio.CancelledError:
        if lease.lost and body.uncancel() == 0:
            raise LeaseLost(name) from None
        raise
    finally:
        renewer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await renewer
        if not lease.lost:
            try:
                await release(name, me)
            except Exception as exc:  # it expires on its own
                log.warning("releasing lease %s failed: %s", name, exc)


def _detail(slot: datetime | None, state: str, result: Any = None) -> str:
    return json.dumps({"slot": slot.isoformat() if slot else None, "state": state, "result": result}, default=str)


async def record_job_run(name: str, holder: str, *, started_at: datetime, slot: datetime | None, result: Any) -> None:
    """Record a completed fleet-wide job run (cutover-check reads the reconcile's `finished_at`)."""
    async with db.transaction() as session:
        await session.execute(
            text(
                "INSERT INTO job_runs (name, holder, started_at, finished_at, detail) "
                "VALUES (:name, :holder, :started_at, now(), :detail) "
                "ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, started_at = EXCLUDED.started_at, "
                "finished_at = EXCLUDED.finished_at, detail = EXCLUDED.detail"
            ),
            {"name": name, "holder": holder, "started_at": started_at, "detail": _detail(slot, "done", result)},
        )


# Claim a slot (under the lease, so nobody else is running it): only if the last recorded run never finished (its
# holder died), was a manual run, or stood for an older slot. `finished_at` keeps the last completed run's time
# while the new one runs (cutover-check reads it).
_CLAIM_SLOT = """
INSERT INTO job_runs AS j (name, holder, started_at, finished_at, detail)
VALUES (:name, :holder, now(), NULL, :detail)
ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, started_at = EXCLUDED.started_at, detail = EXCLUDED.detail
WHERE (j.detail::jsonb ->> 'state') IS DISTINCT FROM 'done'
   OR (j.detail::jsonb ->> 'slot') IS NULL
   OR (j.detail::jsonb ->> 'slot')::timestamptz < CAST(:slot AS timestamptz)
RETURNING started_at
"""


async def run_singleton(
    name: str,
    slot: datetime,
    job: Callable[[], Awaitable[Any]],
    *,
    ttl_seconds: float = 60,
    holder: str | None = None,
) -> bool:
    """Run `job` once fleet-wide for `slot` (the scheduled time it stands for). Returns False when skipped:
    another worker holds the lease, or this slot (or a later one) already completed."""
    me = holder or new_worker_id()
    try:
        async with hold_lease(name, ttl_seconds, holder=me):
            async with db.transaction() as session:
                claimed = (
                    await session.execute(
                        text(_CLAIM_SLOT),
                        {"name": name, "holder": me, "detail": _detail(slot, "running"), "slot": slot.isoformat()},
                    )
                ).first()
            if claimed is None:
                log.info("%s already ran for slot %s", name, slot.isoformat())
                return False
            result = await job()
            await record_job_run(name, me, started_at=claimed.started_at, slot=slot, result=result)
            return True
    except LeaseBusy:
        log.info("%s is running elsewhere; skipping slot %s", name, slot.isoformat())
        return False
