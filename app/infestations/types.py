"""The atlas's JSON twins: the keyset pages of ledger rows and affected repositories, and the index and show
twins, built of the typed rows of `app.infestations.rows`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from app.infestations.rows import AffectedRepository, Infestation, InfestationFilters, Instance, as_answer
from app.kernel.answers import Answer, Timestamp
from app.kernel.paging import Page

P = TypeVar("P", bound=Answer)


class InstancePage(Answer):
    """A keyset page of the ledger."""

    entries: list[Instance]
    next_cursor: str | None


class AffectedRepositoryPage(Answer):
    """A keyset page of affected repositories."""

    entries: list[AffectedRepository]
    next_cursor: str | None


def _keyset_page(answer: Callable[..., P], entry: type[Answer], page: Page[dict[str, Any]]) -> P:
    return answer(entries=[as_answer(entry, row) for row in page["entries"]], next_cursor=page["next_cursor"])


def instance_page(page: Page[dict[str, Any]]) -> InstancePage:
    return _keyset_page(InstancePage, Instance, page)


def affected_repository_page(page: Page[dict[str, Any]]) -> AffectedRepositoryPage:
    return _keyset_page(AffectedRepositoryPage, AffectedRepository, page)


class InfestationList(Answer):
    items: list[Infestation]
    refreshed_at: Timestamp | None
    filters: InfestationFilters


class InfestationShow(Answer):
    infestation: Infestation
    refreshed_at: Timestamp | None
    repositories: AffectedRepositoryPage
    instances: InstancePage
