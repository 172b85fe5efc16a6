"""Claims and maintainerships: the only writer of `maintainer_claims`, `repository_maintainers` and the participation
mode they set and restore; verification (the daily recheck: app.maintainers.recheck; docs/domain.md §14)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import ColumnElement, and_, delete, exists, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.accounts.models import Account
from app.kernel import db, ratelimit
from app.kernel.answers import iso
from app.kernel.errors import Conflict, NotFound, ServiceUnavailable, ValidationError
from app.kernel.purge import purge_after_commit
from app.kernel.quotas import DAY_SECONDS, DailyQuota, exempt_from_quotas, require_within_quota
from app.kernel.shared_cache import repository_tag
from app.maintainers import forge
from app.maintainers.access import NO_REPOSITORY, acting_account, listed_repository, slug
from app.maintainers.models import REPLACEABLE_MODES, MaintainerClaim, RepositoryMaintainer
from app.maintainers.types import Claim
from app.record.outbox import ring_webhooks_after_commit
from app.registry.models import Repository
from app.reports.models import CanonicalFinding, CanonicalFindingCheck
from app.reports.quorum import refresh_repository_checks

CLAIM_LIFETIME = timedelta(days=7)
# new claims an account may make a day, by standing (each is a token to commit and, verified, a forge fetch a day)
CLAIMS_PER_DAY = DailyQuota("maintainer claims", reviewer=30, active=10, other=5)
VERIFIED_MODE = "maintainer_verified"
# every verification asks the forge: an account's attempts are counted (all of them, 503s included: a forge outage
# must not let one account turn into a flood), apart from the refused-attempt allowance (a forge outage then
# locks nobody out of other routes)
VERIFIES = ratelimit.Window(
    "verifies", 10, 600, "at most {limit} claim verifications every 10 minutes per account: each one asks the forge"
)
BUSY_RETRY_AFTER = 5  # seconds a verify is told to wait when every forge fetch slot of the process is taken
_NO_CLAIM = {"claim": ["not found"]}


@dataclass(frozen=True)
class Ended:
    """A maintainership that ended."""

    repository: str
    handle: str
    reason: str


def new_token() -> str:
    """A one-time claim token: 32 random bytes, URL-safe (one line of a text file)."""
    return "tarakan-verify-" + secrets.token_urlsafe(32)


def _view(claim: MaintainerClaim, repository: Repository) -> Claim:
    """The claim as its account sees it (the API's and the CLI's answer)."""
    return Claim(
        id=claim.id,
        repository=slug(repository),
        state=claim.state,
        token=claim.token,
        path=forge.VERIFY_PATH,
        expires_at=iso(claim.expires_at) or "",
        verified_at=iso(claim.verified_at),
    )


def _current(repository_id: int, account_id: int) -> list[ColumnElement[bool]]:
    return [
        RepositoryMaintainer.repository_id == repository_id,
        RepositoryMaintainer.account_id == account_id,
        RepositoryMaintainer.ended_at.is_(None),
    ]


async def claim_repository(account_id: int, host: str, owner: str, name: str) -> tuple[Claim, bool]:
    """The account's pending claim on a listed repository, made now or the one it already has (True when made
    now). An expired unverified claim is replaced by a new one (a new token). 409 when the account already
    maintains the repository."""
    async with db.transaction() as session:
        account = await acting_account(session, account_id)
        repository = await listed_repository(session, host, owner, name)
        if (await session.execute(select(exists().where(*_current(repository.id, account_id))))).scalar():
            raise Conflict({"repository": ["you already maintain this repository"]})
        pending = MaintainerClaim.state == "pending"
        mine = and_(MaintainerClaim.repository_id == repository.id, MaintainerClaim.account_id == account_id)
        await session.execute(delete(MaintainerClaim).where(mine, pending, MaintainerClaim.expires_at <= func.now()))
        if not (await session.execute(select(exists().where(mine, pending)))).scalar():
            await _require_claim_quota(session, account)
        inserted = (
            await session.execute(
                insert(MaintainerClaim)
                .values(
                    repository_id=repository.id,
                    account_id=account_id,
                    token=new_token(),
                    expires_at=func.now() + CLAIM_LIFETIME,
                )
                .on_conflict_do_nothing(
                    index_elements=["repository_id", "account_id"], index_where=MaintainerClaim.state == "pending"
                )
                .returning(MaintainerClaim.id)
            )
        ).scalar()
        claim = (await session.execute(select(MaintainerClaim).where(mine, pending))).scalar_one()
        return _view(claim, repository), inserted is not None


async def _require_claim_quota(session: AsyncSession, account: Account) -> None:
    """429 past the account's daily quota of new claims (CLAIMS_PER_DAY; moderators exempt), counted under the
    account's row lock so that concurrent claims of one account cannot both pass the last slot. Claims are never
    deleted within a day of being made (they expire after CLAIM_LIFETIME), so the count is every one made."""
    if exempt_from_quotas(account):
        return
    await session.execute(select(Account.id).where(Account.id == account.id).with_for_update())
    made_today = (
        await session.execute(
            select(func.count())
            .select_from(MaintainerClaim)
            .where(
                MaintainerClaim.account_id == account.id,
                MaintainerClaim.inserted_at > func.now() - timedelta(seconds=DAY_SECONDS),
            )
        )
    ).scalar_one()
    require_within_quota(account, CLAIMS_PER_DAY, int(made_today))


async def _own_claim(session: AsyncSession, account_id: int, claim_id: int) -> tuple[MaintainerClaim, Repository]:
    row = (
        await session.execute(
            select(MaintainerClaim, Repository)
            .join(Repository, Repository.id == MaintainerClaim.repository_id)
            .where(MaintainerClaim.id == claim_id, MaintainerClaim.account_id == account_id)
        )
    ).one_or_none()
    if row is None:
        raise NotFound(_NO_CLAIM)  # another account's claim is no more visible than a missing one
    return row[0], row[1]


def _token_refused(detail: str) -> ValidationError:
    return ValidationError({"token": [detail]})


async def verify_claim(account_id: int, claim_id: int) -> Claim:
    """Verify one of the account's claims against the forge: the file must hold the claim's token on a line of its
    own. Verified: the account maintains the repository. 422 naming `token` when the file is missing or holds
    another token (the claim stays pending), 503 naming the forge when the forge fails, 404 for another account's
    claim. A verified claim answers as it is. Every attempt counts against VERIFIES (429 past it); when the process
    already has forge.USER_FETCHES fetches in flight, a 503 with Retry-After at once (nothing queues)."""
    await ratelimit.take(VERIFIES, f"account:{account_id}")
    async with db.read_session(replica=False) as session:
        account = await acting_account(session, account_id)
        claim, repository = await _own_claim(session, account.id, claim_id)
        if claim.state == "verified":
            return _view(claim, repository)
        if repository.listing_status != "listed":
            raise NotFound(NO_REPOSITORY)
        if claim.expires_at <= db.utcnow():
            raise _token_refused("this claim has expired; claim the repository again for a new token")
        token, host, owner, name = claim.token, repository.host, repository.owner, repository.name
    # the forge is asked with no transaction open and no row locked
    with forge.user_fetch_slot() as slot:
        if not slot:
            raise ServiceUnavailable(
                {"forge": ["too many verifications are asking the forge right now; try again in a few seconds"]},
                retry_after=BUSY_RETRY_AFTER,
                message="Too many verifications are asking the forge right now. Try again in a few seconds.",
            )
        fetched = await forge.fetch_verify_file(host, owner, name)
    if fetched.outcome == "failed":
        raise ServiceUnavailable(
            {"forge": [f"{fetched.forge} did not give the verification file: {fetched.detail}; try again later"]},
            retry_after=forge.RETRY_AFTER,
            message=f"The forge ({fetched.forge}) could not be asked for {forge.VERIFY_PATH}. Try again later.",
        )
    if fetched.outcome == "missing":
        raise _token_refused(f"{forge.VERIFY_PATH} was not found on the default branch ({fetched.detail})")
    if fetched.outcome == "refused":
        raise _token_refused(f"{forge.VERIFY_PATH} could not be read: {fetched.detail}")
    if not fetched.holds(token):
        raise _token_refused(f"{forge.VERIFY_PATH} does not hold this claim's token on a line of its own")
    return await _record_verification(account_id, claim_id)


async def _record_verification(account_id: int, claim_id: int) -> Claim:
    async with db.transaction() as session:
        await acting_account(session, account_id)  # still in good standing after the fetch
        claim = (
            await session.execute(
                select(MaintainerClaim)
                .where(MaintainerClaim.id == claim_id, MaintainerClaim.account_id == account_id)
                .with_for_update()
            )
        ).scalar_one_or_none()
        if claim is None:
            raise NotFound(_NO_CLAIM)
        # the repository row is the lock that orders maintainers of one repository (mode changes, the last one)
        repository = (
            await session.execute(select(Repository).where(Repository.id == claim.repository_id).with_for_update())
        ).scalar_one()
        if claim.state == "verified":
            return _view(claim, repository)
        await _start_maintainership(session, repository, account_id, claim.id)
        ring_webhooks_after_commit()  # their webhooks are told of the embargoes running now (webhook_queue's sweep)
        claim.state = "verified"
        claim.verified_at = db.utcnow()
        await session.flush()
        return _view(claim, repository)


async def _start_maintainership(session: AsyncSession, repository: Repository, account_id: int, claim_id: int) -> None:
    """The account maintains the (locked) repository from now; the mode becomes maintainer_verified from
    unclaimed or community only, and the mode it replaced is carried by every current maintainer's row."""
    if (await session.execute(select(exists().where(*_current(repository.id, account_id))))).scalar():
        return
    replaced: str | None = None
    if repository.participation_mode in REPLACEABLE_MODES:
        replaced = repository.participation_mode
        repository.participation_mode = VERIFIED_MODE
        repository.updated_at = db.utcnow()
    elif repository.participation_mode == VERIFIED_MODE:
        replaced = (
            await session.execute(
                select(RepositoryMaintainer.replaced_mode)
                .where(RepositoryMaintainer.repository_id == repository.id, RepositoryMaintainer.ended_at.is_(None))
                .limit(1)
            )
        ).scalar()
    session.add(
        RepositoryMaintainer(
            repository_id=repository.id,
            account_id=account_id,
            claim_id=claim_id,
            replaced_mode=replaced,
            last_checked_at=func.now(),
        )
    )
    await session.flush()
    purge_after_commit({repository_tag(repository.id)})  # its pages name their maintainers (shared cache)
    # the conflict rule (docs/domain.md §1.5): this account's checks on the repository stop counting at once
    checked_here = exists().where(
        CanonicalFindingCheck.account_id == account_id,
        CanonicalFindingCheck.canonical_finding_id == CanonicalFinding.id,
        CanonicalFinding.repository_id == repository.id,
    )
    if (await session.execute(select(checked_here))).scalar():
        await refresh_repository_checks(session, repository.id)


async def end_maintainership(
    session: AsyncSession, maintainer: RepositoryMaintainer, *, reason: str, ended_by_id: int | None
) -> None:
    """End one current maintainership in the caller's transaction (the caller has locked the row). When it was
    the repository's last, the mode it replaced comes back, if the mode is still maintainer_verified (a
    moderator's paused or curated stays)."""
    repository = (
        await session.execute(select(Repository).where(Repository.id == maintainer.repository_id).with_for_update())
    ).scalar_one()
    maintainer.ended_at = db.utcnow()
    maintainer.ended_reason = reason
    maintainer.ended_by_id = ended_by_id
    await session.flush()
    purge_after_commit({repository_tag(repository.id)})  # its pages name their maintainers (shared cache)
    others = exists().where(
        RepositoryMaintainer.repository_id == repository.id, RepositoryMaintainer.ended_at.is_(None)
    )
    if (await session.execute(select(others))).scalar():
        return
    if repository.participation_mode == VERIFIED_MODE and maintainer.replaced_mode is not None:
        repository.participation_mode = maintainer.replaced_mode
        repository.updated_at = db.utcnow()
        await session.flush()


ACCOUNT_LOCKED = "account_locked"


@dataclass(frozen=True)
class EndedHere:
    """One maintainership a lock ended: the repository (host/owner/name) and its mode before and after."""

    repository: str
    mode_before: str
    mode_after: str


async def end_account_maintainerships(
    session: AsyncSession, account_id: int, *, ended_by_id: int | None
) -> list[EndedHere]:
    """End every current maintainership of an account that is locked out (banned or suspended), reason
    `account_locked`, in the caller's transaction (the one that changed the account's state). The repositories
    are locked first, in id order, as every maintainer change of a repository does; lifting the lock restores
    nothing (the account claims again). Returns what ended, repository by repository."""
    mine = and_(RepositoryMaintainer.account_id == account_id, RepositoryMaintainer.ended_at.is_(None))
    repositories = (
        (
            await session.execute(
                select(Repository)
                .where(Repository.id.in_(select(RepositoryMaintainer.repository_id).where(mine)))
                .order_by(Repository.id)
                .with_for_update()
            )
        )
        .scalars()
        .all()
    )
    ended: list[EndedHere] = []
    for repository in repositories:
        maintainer = await lock_current_maintainer(session, repository.id, account_id)
        if maintainer is not None:
            mode = repository.participation_mode
            await end_maintainership(session, maintainer, reason=ACCOUNT_LOCKED, ended_by_id=ended_by_id)
            ended.append(EndedHere(slug(repository), mode, repository.participation_mode))
    return ended


async def lock_current_maintainer(
    session: AsyncSession, repository_id: int, account_id: int
) -> RepositoryMaintainer | None:
    """The account's current maintainership of the repository, locked (None when there is none)."""
    return (
        await session.execute(
            select(RepositoryMaintainer).where(*_current(repository_id, account_id)).with_for_update()
        )
    ).scalar_one_or_none()
