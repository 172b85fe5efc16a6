"""The atlas's JSON twins: the keyset pages of ledger rows and affected repositories, and the index and show
twins, built of the typed rows of `app.infestations.rows`."""

from __future__ import annotations

from typing import Any

from app.infestations.rows import AffectedRepository, Infestation, InfestationFilters, Instance, as_answer
from app.kernel.answers import Answer, Timestamp
from app.kernel.paging import Page


class InstancePage(Answer):
    """A keyset page of the ledger."""

    entries: list[Instance]
    next_cursor: str | None


def instance_page(page: Page[dict[str, Any]]) -> InstancePage:
    entries = [as_answer(Instance, row) for row in page["entries"]]
    return InstancePage(entries=entries, next_cursor=page["next_cursor"])


class AffectedRepositoryPage(Answer):
    """A keyset page of affected repositories."""

    entries: list[AffectedRepository]
    next_cursor: str | None


def affected_repository_page(page: Page[dict[str, Any]]) -> AffectedRepositoryPage:
    entries = [as_answer(AffectedRepository, row) for row in page["entries"]]
    return AffectedRepositoryPage(entries=entries, next_cursor=page["next_cursor"])


class InfestationList(Answer):
    items: list[Infestation]
    refreshed_at: Timestamp | None
    filters: InfestationFilters


class InfestationShow(Answer):
    infestation: Infestation
    refreshed_at: Timestamp | None
    repositories: AffectedRepositoryPage
    instances: InstancePage
