"""Registering and reading repositories: the only place that inserts `repositories` rows. (The hard delete, a
moderator's action that also removes the reports' rows, is `app.moderation.service.delete_repository`.)"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert

from app.kernel import db
from app.kernel.errors import ValidationError
from app.registry.metrics import registry_changed
from app.registry.models import LISTING_STATUSES, Repository
from app.registry.validation import canonical_url, validate_repo_ref


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
        if inserted_id is not None:
            registry_changed()
        repository = (
            await session.execute(
                select(Repository).where(Repository.host == host, Repository.owner == owner, Repository.name == name)
            )
        ).scalar_one()
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
