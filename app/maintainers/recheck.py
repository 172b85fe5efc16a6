"""The daily recheck of every current maintainer's file (docs/domain.md §14), and the pruning of expired claims."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select

from app.accounts.models import Account
from app.kernel import db
from app.kernel.config import maintainer_recheck_hours
from app.maintainers import forge
from app.maintainers.models import MaintainerClaim, RepositoryMaintainer
from app.maintainers.service import Ended, end_maintainership
from app.registry.models import Repository

RECHECK_BATCH = 100
RECHECK_CONCURRENCY = 4  # fetches in flight at once during a recheck
# a redirect or 401 on this many rechecks, MAINTAINER_RECHECK_HOURS apart, ends a maintainership (the file cannot be
# read, so it proves nothing any more)
UNREACHABLE_CHECKS = 3
PROOF_UNREACHABLE = "proof_unreachable"


@dataclass(frozen=True)
class _Due:
    id: int
    host: str
    owner: str
    name: str
    handle: str
    token: str


async def _due_batch(after_id: int) -> list[_Due]:
    async with db.read_session(replica=False) as session:
        rows = (
            await session.execute(
                select(
                    RepositoryMaintainer.id,
                    Repository.host,
                    Repository.owner,
                    Repository.name,
                    Account.handle,
                    MaintainerClaim.token,
                )
                .join(Repository, Repository.id == RepositoryMaintainer.repository_id)
                .join(Account, Account.id == RepositoryMaintainer.account_id)
                .join(MaintainerClaim, MaintainerClaim.id == RepositoryMaintainer.claim_id)
                .where(RepositoryMaintainer.ended_at.is_(None), RepositoryMaintainer.id > after_id)
                .order_by(RepositoryMaintainer.id)
                .limit(RECHECK_BATCH)
            )
        ).all()
    return [_Due(int(r[0]), str(r[1]), str(r[2]), str(r[3]), str(r[4]), str(r[5])) for r in rows]


def _unreachable_again(maintainer: RepositoryMaintainer, now: datetime, hours: float) -> bool:
    """Count one more recheck the forge answered a redirect or 401 (a refusal): the first starts the streak, and
    another counts once it is `hours` times the counted ones after the first (at most one a day). True when
    UNREACHABLE_CHECKS are counted: the proof has been unreachable for that long."""
    if maintainer.first_unreachable_at is None:
        maintainer.first_unreachable_at, maintainer.unreachable_checks = now, 1
    elif now - maintainer.first_unreachable_at >= timedelta(hours=hours) * maintainer.unreachable_checks:
        maintainer.unreachable_checks += 1
    return maintainer.unreachable_checks >= UNREACHABLE_CHECKS


async def _settle(due: _Due, fetched: forge.Fetched, hours: float) -> Ended | None:
    """Record one recheck: found (the streak of misses ends), gone (the first miss starts a streak, a miss at least
    `hours` after its start ends the maintainership), refused by the forge (a redirect, 401, a 403 that is not its
    rate limit: UNREACHABLE_CHECKS of them `hours` apart end it) or the forge failing (nothing but the time of the
    check). Any answer but a refusal or a failure ends the refusals' streak."""
    async with db.transaction() as session:
        maintainer = (
            await session.execute(
                select(RepositoryMaintainer)
                .where(RepositoryMaintainer.id == due.id, RepositoryMaintainer.ended_at.is_(None))
                .with_for_update()
            )
        ).scalar_one_or_none()
        if maintainer is None:
            return None  # ended meanwhile (a moderator)
        now = db.utcnow()
        maintainer.last_checked_at = now
        if fetched.outcome in ("found", "missing"):
            maintainer.first_unreachable_at, maintainer.unreachable_checks = None, 0
        if fetched.outcome == "found" and fetched.holds(due.token):
            maintainer.first_missing_at = None
        elif fetched.outcome in ("found", "missing"):  # gone, or no longer holding this maintainer's token
            if maintainer.first_missing_at is None:
                maintainer.first_missing_at = now
            elif now - maintainer.first_missing_at >= timedelta(hours=hours):
                await end_maintainership(session, maintainer, reason="file_missing", ended_by_id=None)
                return Ended(f"{due.host}/{due.owner}/{due.name}", due.handle, "file_missing")
        elif fetched.unreachable and _unreachable_again(maintainer, now, hours):
            await end_maintainership(session, maintainer, reason=PROOF_UNREACHABLE, ended_by_id=None)
            return Ended(f"{due.host}/{due.owner}/{due.name}", due.handle, PROOF_UNREACHABLE)
        # "failed" (5xx, 429, a rate-limited 403, no answer) ends nothing and counts nothing
        await session.flush()
    return None


async def recheck_maintainers() -> list[Ended]:
    """Fetch every current maintainer's file once and settle each (MAINTAINER_RECHECK_HOURS read now). Returns the
    maintainerships that ended."""
    hours = maintainer_recheck_hours()
    ended: list[Ended] = []
    slots = asyncio.Semaphore(RECHECK_CONCURRENCY)

    async def one(due: _Due) -> None:
        async with slots:
            fetched = await forge.fetch_verify_file(due.host, due.owner, due.name)
        result = await _settle(due, fetched, hours)
        if result is not None:
            ended.append(result)

    after_id = 0
    while batch := await _due_batch(after_id):
        await asyncio.gather(*(one(due) for due in batch))
        after_id = batch[-1].id
    return sorted(ended, key=lambda e: (e.repository, e.handle))


async def prune_expired_claims(older_than: timedelta = timedelta(days=30)) -> int:
    """Delete pending claims that expired more than `older_than` ago (nothing refers to them). Returns how many."""
    async with db.transaction() as session:
        result = await session.execute(
            delete(MaintainerClaim).where(
                MaintainerClaim.state == "pending", MaintainerClaim.expires_at < func.now() - older_than
            )
        )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
