"""The one write of a repository's listing status (docs/domain.md §8): a moderator's action and the registry's
`forge_missing` quarantine (app.registry.metadata) both go through it, each audited by its caller."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.kernel import db
from app.record.outbox import mark_repository_dirty
from app.registry.models import Repository


async def set_listing_status(session: AsyncSession, repository: Repository, listing_status: str) -> dict[str, Any]:
    """The one listing write of a locked row (a moderator's action and the registry's `forge_missing` quarantine):
    the delist-safe key discovery finds the patterns it already feeds. Returns the audit event's `before`."""
    before = {"listing_status": repository.listing_status}
    if listing_status == "listed" and repository.listing_status == "quarantined":
        # listed again by a moderator: the name as the forge has it now, counted afresh (no forge_missing loop)
        repository.forge_missing_runs, repository.forge_id = 0, None
    repository.listing_status = listing_status
    repository.updated_at = db.utcnow()
    await session.flush()
    await mark_repository_dirty(session, repository.id, "listing_change")
    return before
