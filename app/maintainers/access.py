"""Who a maintainers' action is about: the acting account in good standing, and the listed repository a reference
names (anything else is a 404)."""

from __future__ import annotations

from sqlalchemy import Select, and_, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.accounts.models import Account
from app.kernel.actors import require_good_standing
from app.kernel.errors import NotFound, ValidationError
from app.maintainers.models import RepositoryMaintainer
from app.record.public import LISTED
from app.registry.models import Repository
from app.registry.validation import validate_repo_ref

NO_REPOSITORY = {"repository": ["not found"]}


def slug(repository: Repository) -> str:
    return f"{repository.host}/{repository.owner}/{repository.name}"


async def acting_account(session: AsyncSession, account_id: int) -> Account:
    """The account as stored now, in good standing (404 when gone, 403 otherwise)."""
    account = (await session.execute(select(Account).where(Account.id == account_id))).scalar_one_or_none()
    if account is None:
        raise NotFound({"account": ["not found"]})
    require_good_standing(account)
    return account


def listed_repository_query(host: str, owner: str, name: str) -> Select[Repository] | None:
    """The listed repository of this reference, or None for a reference no repository can have."""
    try:
        host, owner, name = validate_repo_ref(host, owner, name)
    except ValidationError:
        return None
    return select(Repository).where(
        Repository.host == host,
        Repository.owner == owner,
        Repository.name == name,
        Repository.listing_status == LISTED,
    )


async def listed_repository(
    session: AsyncSession, host: str, owner: str, name: str, *, lock: bool = False
) -> Repository:
    """The listed repository of this reference; 404 for anything else (unknown, not listed, malformed). `lock`:
    FOR NO KEY UPDATE (orders the webhook registrations of one repository)."""
    query = listed_repository_query(host, owner, name)
    if query is not None and lock:
        query = query.with_for_update(key_share=True)
    repository = None if query is None else (await session.execute(query)).scalar_one_or_none()
    if repository is None:
        raise NotFound(NO_REPOSITORY)
    return repository


async def maintains(session: AsyncSession, repository_id: int, account_id: int, *, lock: bool = False) -> bool:
    """The account is a current verified maintainer of the repository. `lock` (writes only): read under a share lock,
    so a moderator ending the maintainership waits for this transaction, or this one sees it ended."""
    query = select(RepositoryMaintainer.id).where(
        and_(
            RepositoryMaintainer.repository_id == repository_id,
            RepositoryMaintainer.account_id == account_id,
            RepositoryMaintainer.ended_at.is_(None),
        )
    )
    found = await session.execute(query.with_for_update(read=True) if lock else query)
    return found.first() is not None
