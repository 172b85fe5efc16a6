"""Listed repositories as keyset pages and streams (domain §7.1; design "Registry list & SEO pagination").

There is no unbounded list: a page is at most 5,000 rows by `id` ascending on the partial index
`repositories_listed_id_idx`, and a stream opens one short read session per page, never one for the whole stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import text

from app import db

DEFAULT_PAGE = 1_000
MAX_PAGE = 5_000

# a range scan of the partial index repositories_listed_id_idx
_PAGE_SQL = """
SELECT id, host, owner, name, canonical_url, status, updated_at
FROM repositories
WHERE listing_status = 'listed' AND id > :after_id {before}
ORDER BY id
LIMIT :fetch
"""
_PAGE = text(_PAGE_SQL.format(before=""))
_PAGE_BEFORE = text(_PAGE_SQL.format(before="AND id < :before_id"))


def clamp_limit(limit: int, maximum: int = MAX_PAGE) -> int:
    return max(1, min(int(limit), maximum))


async def list_listed_repositories_page(
    *, limit: int = DEFAULT_PAGE, after_id: int = 0, before_id: int | None = None
) -> dict[str, Any]:
    """One page of listed repositories with `id > after_id` (and `< before_id` when given), id ascending.

    Returns `{"repositories": [...], "next_after_id": int | None}`; `next_after_id` is None when no row follows
    (the page fetches one extra row to know), so a caller never issues a last, empty query."""
    limit = clamp_limit(limit)
    params = {"after_id": max(0, int(after_id)), "before_id": before_id, "fetch": limit + 1}
    async with db.read_session() as session:
        query = _PAGE if before_id is None else _PAGE_BEFORE
        rows = [dict(r) for r in (await session.execute(query, params)).mappings()]
    more = len(rows) > limit
    rows = rows[:limit]
    return {"repositories": rows, "next_after_id": rows[-1]["id"] if more else None}


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
