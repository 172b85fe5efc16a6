"""Registering and deleting repositories: the only place that inserts or deletes `repositories` rows."""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.dialects.postgresql import insert

from app.accounts.models import Account
from app.infestations.hooks import mark_repository_dirty, schedule_refresh_after_commit
from app.kernel import db
from app.kernel.errors import Forbidden, NotFound, ValidationError
from app.moderation.models import AuditEvent
from app.registry.models import LISTING_STATUSES, Repository
from app.registry.stats import invalidate_registry_stats
from app.registry.validation import canonical_url, validate_repo_ref
from app.reports.models import CanonicalFinding, Scan, ScanFinding

MODERATOR_ROLES = frozenset({"moderator", "admin"})
# domain §1.6: moderator mutations also need a state that may act
ACTING_STATES = frozenset({"probation", "active"})


async def register_repository(
    host: str, owner: str, name: str, *, listing_status: str = "listed", submitted_by_id: int | None = None
) -> tuple[Repository, bool]:
    """Register a repository, or return the existing one unchanged. Returns (repository, created).

    A new repository has no findings, so inserting it (even as listed) changes no infestation rollup.
    """
    host, owner, name = validate_repo_ref(host, owner, name)
    if listing_status not in LISTING_STATUSES:
        raise ValidationError({"listing_status": [f"must be one of {', '.join(LISTING_STATUSES)}"]})
    async with db.transaction() as session:
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
                )
                .on_conflict_do_nothing(index_elements=["host", "owner", "name"])
                .returning(Repository.id)
            )
        ).scalar()
        repository = (
            await session.execute(
                select(Repository).where(Repository.host == host, Repository.owner == owner, Repository.name == name)
            )
        ).scalar_one()
    if inserted_id is not None:
        invalidate_registry_stats()
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


async def delete_repository(
    host: str, owner: str, name: str, *, actor_id: int, reason: str | None = None, notes: str | None = None
) -> None:
    """Hard-delete a repository with its reports and findings (moderators and admins only), in one transaction.

    The patterns it fed are marked dirty *before* the rows go (the key discovery reads them), and the rollup
    worker is rung after the commit.
    """
    ref = validate_repo_ref(host, owner, name)
    async with db.transaction() as session:
        actor = await session.get(Account, actor_id)
        if actor is None or actor.platform_role not in MODERATOR_ROLES or actor.state not in ACTING_STATES:
            raise Forbidden({"actor": ["only an active moderator or admin may delete a repository"]})
        repository = (
            await session.execute(
                select(Repository)
                .where(Repository.host == ref[0], Repository.owner == ref[1], Repository.name == ref[2])
                .with_for_update()
            )
        ).scalar()
        if repository is None:
            raise NotFound({"repository": [f"{'/'.join(ref)} is not registered"]})
        await mark_repository_dirty(session, repository.id, "delete")
        session.add(
            AuditEvent(
                actor_id=actor_id,
                action="repository.delete",
                subject_type="repository",
                subject_id=str(repository.id),
                before={
                    "host": repository.host,
                    "owner": repository.owner,
                    "name": repository.name,
                    "listing_status": repository.listing_status,
                    "scan_count": repository.scan_count,
                    "open_findings_count": repository.open_findings_count,
                },
                after=None,
                reason=reason,
                notes=notes,
            )
        )
        # scan_findings.canonical_finding_id is ON DELETE RESTRICT: occurrences go first (with their reports),
        # then the canonicals (their checks cascade), then the repository (rollup rows cascade).
        scan_ids = select(Scan.id).where(Scan.repository_id == repository.id)
        await session.execute(delete(ScanFinding).where(ScanFinding.scan_id.in_(scan_ids)))
        await session.execute(delete(Scan).where(Scan.repository_id == repository.id))
        await session.execute(delete(CanonicalFinding).where(CanonicalFinding.repository_id == repository.id))
        await session.execute(delete(Repository).where(Repository.id == repository.id))
    invalidate_registry_stats()
    await schedule_refresh_after_commit()
