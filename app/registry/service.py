"""Registering and reading repositories: the only place that inserts `repositories` rows (an account's registration:
docs/security.md "Decisions"; the hard delete is `app.moderation.service.delete_repository`)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.accounts.models import Account
from app.kernel import db
from app.kernel.actors import require_good_standing, viewer_of
from app.kernel.errors import Forbidden, NotFound, ValidationError
from app.kernel.quotas import DailyQuota, require_within_quota
from app.record.visibility import repository_visible
from app.registry import metadata
from app.registry.metrics import registry_counts_moved
from app.registry.models import LISTING_STATUSES, Repository
from app.registry.validation import canonical_url, validate_repo_ref

REGISTRATIONS_PER_DAY = DailyQuota("repository registrations", reviewer=50, active=20, other=5)
_HIDDEN = {"repository": ["not found"]}
_DAY = timedelta(days=1)


async def _acting_account(session: AsyncSession, account_id: int, *, lock: bool = True) -> Account:
    """The registering account as stored now, locked: concurrent registrations by one account are counted one
    after another against its quota."""
    query = select(Account).where(Account.id == account_id)
    account = (await session.execute(query.with_for_update() if lock else query)).scalar_one_or_none()
    if account is None:
        raise Forbidden({"account": ["does not exist"]})
    require_good_standing(account)
    return account


async def _registered_today(session: AsyncSession, account_id: int) -> int:
    return int(
        (
            await session.execute(
                select(func.count())
                .select_from(Repository)
                .where(Repository.submitted_by_id == account_id, Repository.inserted_at > func.now() - _DAY)
            )
        ).scalar_one()
    )


async def _may_register(account_id: int) -> None:
    """The account's standing and quota before its forge lookup (checked again under the lock): a refused
    account spends none of the forge's rate, which every report's evidence check shares."""
    async with db.read_session(replica=False) as session:
        account = await _acting_account(session, account_id, lock=False)
        require_within_quota(account, REGISTRATIONS_PER_DAY, await _registered_today(session, account.id))


async def register_repository(
    host: str, owner: str, name: str, *, listing_status: str = "listed", submitted_by_id: int | None = None
) -> tuple[Repository, bool]:
    """Register a repository, or return the existing one unchanged. Returns (repository, created).

    With `submitted_by_id` (an account's registration): Forbidden unless the account may act, NotFound for a
    repository it may not see, RateLimited past its daily quota of new repositories. A new name is first looked up
    on its forge, outside the transaction (app.registry.metadata: ValidationError on `name` when the forge has no
    such public repository). A new repository has no findings, so inserting it (even as listed) changes no
    infestation rollup; the registry stats are dropped at most once per TTL (`registry_counts_moved`).
    """
    host, owner, name = validate_repo_ref(host, owner, name)
    if listing_status not in LISTING_STATUSES:
        raise ValidationError({"listing_status": [f"must be one of {', '.join(LISTING_STATUSES)}"]})
    same = (Repository.host == host, Repository.owner == owner, Repository.name == name)
    lookup = metadata.Lookup("unchecked")  # a known name is answered as stored: no lookup
    if await get_repository(host, owner, name) is None:
        if submitted_by_id is not None:
            await _may_register(submitted_by_id)
        lookup = await metadata.look_up(host, owner, name)
    async with db.transaction() as session:
        actor = None
        if submitted_by_id is not None:
            actor = await _acting_account(session, submitted_by_id)
            existing = (await session.execute(select(Repository).where(*same))).scalar()
            if existing is not None:
                if not repository_visible(viewer_of(actor), existing.listing_status):
                    raise NotFound(_HIDDEN)
                return existing, False
            require_within_quota(actor, REGISTRATIONS_PER_DAY, await _registered_today(session, actor.id))
        # ON CONFLICT DO NOTHING: two registrations racing for the same name both succeed, one creates it
        inserted_id = (
            await session.execute(
                insert(Repository)
                .values(
                    host=host,
                    owner=owner,
                    name=name,
                    canonical_url=canonical_url(host, owner, name),
                    listing_status=listing_status,
                    submitted_by_id=submitted_by_id,
                    **lookup.values(),
                )
                .on_conflict_do_nothing(index_elements=["host", "owner", "name"])
                .returning(Repository.id)
            )
        ).scalar()
        if inserted_id is not None:
            registry_counts_moved()
        repository = (await session.execute(select(Repository).where(*same))).scalar_one()
        if actor is not None and not repository_visible(viewer_of(actor), repository.listing_status):
            raise NotFound(_HIDDEN)  # lost a race with a registration that was quarantined since
    return repository, inserted_id is not None


async def get_repository(host: str, owner: str, name: str, *, replica: bool = False) -> Repository | None:
    """The repository with this reference (normalized first), or None; a malformed reference is simply absent."""
    try:
        host, owner, name = validate_repo_ref(host, owner, name)
    except ValidationError:
        return None
    async with db.read_session(replica=replica) as session:
        repository = (
            await session.execute(
                select(Repository).where(Repository.host == host, Repository.owner == owner, Repository.name == name)
            )
        ).scalar()
        if repository is not None:
            session.expunge(repository)  # read_session ends with a rollback, which would expire an attached row
        return repository
