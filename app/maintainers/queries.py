"""Reads of maintainers and claims: a repository's current maintainers (its page and twin), and what the maintain
page shows an account."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, select

from app.accounts.models import Account
from app.kernel import db
from app.kernel.sql import compiled
from app.maintainers.models import MaintainerClaim, RepositoryMaintainer


@dataclass(frozen=True)
class Maintainer:
    handle: str
    since: datetime


_CURRENT = compiled(
    select(Account.handle, RepositoryMaintainer.since)
    .join(Account, Account.id == RepositoryMaintainer.account_id)
    .where(RepositoryMaintainer.repository_id == bindparam("repository_id"), RepositoryMaintainer.ended_at.is_(None))
    .order_by(RepositoryMaintainer.since, RepositoryMaintainer.id)
)


async def current_maintainers(repository_id: int, *, replica: bool = True) -> list[Maintainer]:
    """The repository's current maintainers, longest-serving first."""
    if not replica:
        with db.primary_reads():
            return await current_maintainers(repository_id)
    async with db.reader() as read:
        rows = await read.rows(_CURRENT, {"repository_id": repository_id})
    return [Maintainer(str(handle), since) for handle, since in rows]


async def is_current_maintainer(repository_id: int, account_id: int, *, replica: bool = False) -> bool:
    async with db.read_session(replica=replica) as session:
        found = (
            await session.execute(
                select(RepositoryMaintainer.id).where(
                    RepositoryMaintainer.repository_id == repository_id,
                    RepositoryMaintainer.account_id == account_id,
                    RepositoryMaintainer.ended_at.is_(None),
                )
            )
        ).first()
    return found is not None


async def pending_claim(repository_id: int, account_id: int) -> MaintainerClaim | None:
    """The account's pending claim on the repository, expired or not (the page says which)."""
    async with db.read_session(replica=False) as session:
        claim = (
            await session.execute(
                select(MaintainerClaim).where(
                    MaintainerClaim.repository_id == repository_id,
                    MaintainerClaim.account_id == account_id,
                    MaintainerClaim.state == "pending",
                )
            )
        ).scalar_one_or_none()
        if claim is not None:
            session.expunge(claim)
        return claim
