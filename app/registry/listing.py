"""Listed repositories as keyset pages (at most 5,000) and streams, one short read session a page (docs/domain.md §7.1)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import Row, func, select

from app.kernel.paging import DEFAULT_PAGE, Page, id_range_page, id_range_statements, stream_entries
from app.record.public import listed_repository
from app.registry.models import Repository

_repositories = Repository.__table__
_LISTED = select(_repositories.c.id, _repositories.c.host, _repositories.c.owner, _repositories.c.name).where(
    listed_repository(_repositories)
)
# a range scan of the partial index repositories_listed_id_idx
_STATEMENTS = id_range_statements(
    {
        "api": _LISTED.add_columns(_repositories.c.canonical_url, _repositories.c.status, _repositories.c.updated_at),
        "sitemap": _LISTED.add_columns(func.to_char(func.timezone("UTC", _repositories.c.updated_at), "YYYY-MM-DD")),
    },
    _repositories.c.id,
)


async def list_listed_repositories_page(
    *, limit: int = DEFAULT_PAGE, cursor: str | None = None, after_id: int = 0, before_id: int | None = None
) -> Page[dict[str, Any]]:
    """One page `{"entries", "next_cursor"}` of listed repositories with `after_id < id < before_id`, id
    ascending, continuing after `cursor`. Entries: `id, host, owner, name, canonical_url, status, updated_at`."""
    page = await id_range_page(_STATEMENTS, "api", limit=limit, cursor=cursor, after_id=after_id, before_id=before_id)
    return {"entries": [row._asdict() for row in page["entries"]], "next_cursor": page["next_cursor"]}


async def listed_repositories_sitemap_rows(
    *, limit: int = DEFAULT_PAGE, cursor: str | None = None, after_id: int = 0, before_id: int | None = None
) -> Page[Row[Any]]:
    """The same page as tuples `(id, host, owner, name, UTC date text of updated_at)`."""
    return await id_range_page(
        _STATEMENTS, "sitemap", limit=limit, cursor=cursor, after_id=after_id, before_id=before_id
    )


def stream_listed_repositories(*, page_size: int = DEFAULT_PAGE) -> AsyncIterator[dict[str, Any]]:
    """Every listed repository in id order, one short read session per page."""
    return stream_entries(lambda cursor: list_listed_repositories_page(limit=page_size, cursor=cursor))
