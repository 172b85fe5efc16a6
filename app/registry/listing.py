"""Listed repositories as keyset pages and streams (domain §7.1; design "Registry list & SEO pagination").

There is no unbounded list: a page is at most 5,000 rows by `id` ascending on the partial index
`repositories_listed_id_idx`, and a stream opens one short read session per page, never one for the whole stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import Row, text

from app.kernel import db

DEFAULT_PAGE = 1_000
MAX_PAGE = 5_000

# a range scan of the partial index repositories_listed_id_idx
_PAGE_SQL = """
SELECT {columns}
FROM repositories
WHERE listing_status = 'listed' AND id > :after_id {before}
ORDER BY id
LIMIT :fetch
"""
_COLUMNS = {
    "api": "id, host, owner, name, canonical_url, status, updated_at",
    "sitemap": "id, host, owner, name, to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')",
}
_QUERIES = {
    (shape, bounded): text(_PAGE_SQL.format(columns=columns, before="AND id < :before_id" if bounded else ""))
    for shape, columns in _COLUMNS.items()
    for bounded in (False, True)
}


def clamp_limit(limit: int, maximum: int = MAX_PAGE) -> int:
    return max(1, min(int(limit), maximum))


async def _page_rows(shape: str, limit: int, after_id: int, before_id: int | None) -> tuple[list[Row[Any]], int | None]:
    limit = clamp_limit(limit)
    params = {"after_id": max(0, int(after_id)), "before_id": before_id, "fetch": limit + 1}
    async with db.read_session() as session:
        rows = list((await session.execute(_QUERIES[shape, before_id is not None], params)).all())
    # one extra row tells whether another page follows, so a caller never issues a last, empty query
    if len(rows) > limit:
        return rows[:limit], int(rows[limit - 1][0])
    return rows, None


async def list_listed_repositories_page(
    *, limit: int = DEFAULT_PAGE, after_id: int = 0, before_id: int | None = None
) -> dict[str, Any]:
    """One page of listed repositories with `id > after_id` (and `< before_id` when given), id ascending.

    Returns `{"repositories": [...], "next_after_id": int | None}`; `next_after_id` is None when no row follows."""
    rows, next_after_id = await _page_rows("api", limit, after_id, before_id)
    return {"repositories": [row._asdict() for row in rows], "next_after_id": next_after_id}


async def listed_repositories_sitemap_rows(
    *, limit: int = DEFAULT_PAGE, after_id: int = 0, before_id: int | None = None
) -> tuple[list[Row[Any]], int | None]:
    """The same page as tuples `(id, host, owner, name, UTC date text of updated_at)` and the next cursor."""
    return await _page_rows("sitemap", limit, after_id, before_id)


async def stream_listed_repositories(
    *, page_size: int = DEFAULT_PAGE, after_id: int = 0, before_id: int | None = None
) -> AsyncIterator[dict[str, Any]]:
    """Every listed repository in id order (optionally within `(after_id, before_id)`), one short session per page."""
    cursor: int | None = after_id
    while cursor is not None:
        page = await list_listed_repositories_page(limit=page_size, after_id=cursor, before_id=before_id)
        for repository in page["repositories"]:
            yield repository
        cursor = page["next_after_id"]
