"""Indexable findings: the occurrences a crawler may see (domain §7.4).

An occurrence is indexable when its report is `public` (not `public_summary`, not `restricted`) and its repository
is `listed`. Pages are keyset by occurrence id ascending (the primary key), at most 5,000 rows; a stream opens one
short read session per page.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import Row, text

from app.kernel import db
from app.registry.listing import DEFAULT_PAGE, clamp_limit

INDEXABLE_WHERE = "s.visibility = 'public' AND r.listing_status = 'listed'"

# Walks the primary key from the cursor and checks each occurrence with index lookups, so a page costs what it
# reads whatever the table sizes. `LIMIT 1` keeps the LATERAL subqueries from being flattened into joins the
# planner could turn into hash joins over every scan and repository on every page.
_PAGE_SQL = """
SELECT {columns}
FROM scan_findings f
CROSS JOIN LATERAL (
  SELECT 1 FROM scans s JOIN repositories r ON r.id = s.repository_id
  WHERE s.id = f.scan_id AND {where} LIMIT 1
) AS indexable
LEFT JOIN LATERAL (
  SELECT status, confirmations_count FROM canonical_findings WHERE id = f.canonical_finding_id LIMIT 1
) AS c ON true
WHERE f.id > :after_id {before}
ORDER BY f.id
LIMIT :fetch
"""
_COLUMNS = {
    "api": "f.id, f.public_id, f.updated_at, c.status, coalesce(c.confirmations_count, 0) AS confirmations_count",
    # the sitemap gets text it can splice as is: uuid text and the UTC date (no per-row object parsing)
    "sitemap": "f.id, f.public_id::text, to_char(f.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD'), c.status, "
    "coalesce(c.confirmations_count, 0)",
}
_QUERIES = {
    (shape, bounded): text(
        _PAGE_SQL.format(columns=columns, where=INDEXABLE_WHERE, before="AND f.id < :before_id" if bounded else "")
    )
    for shape, columns in _COLUMNS.items()
    for bounded in (False, True)
}


async def _page_rows(shape: str, limit: int, after_id: int, before_id: int | None) -> tuple[list[Row[Any]], int | None]:
    limit = clamp_limit(limit)
    params = {"after_id": max(0, int(after_id)), "before_id": before_id, "fetch": limit + 1}
    async with db.read_session() as session:
        rows = list((await session.execute(_QUERIES[shape, before_id is not None], params)).all())
    if len(rows) > limit:
        return rows[:limit], int(rows[limit - 1][0])
    return rows, None


async def list_indexable_findings_page(
    *, limit: int = DEFAULT_PAGE, after_id: int = 0, before_id: int | None = None
) -> dict[str, Any]:
    """One page of indexable occurrences with `id > after_id` (and `< before_id` when given), id ascending.

    Each row: `id, public_id, updated_at, status` (the canonical's, None if not yet assimilated),
    `confirmations_count` (the canonical's). Returns `{"findings": [...], "next_after_id": int | None}`."""
    rows, next_after_id = await _page_rows("api", limit, after_id, before_id)
    return {"findings": [row._asdict() for row in rows], "next_after_id": next_after_id}


async def indexable_findings_sitemap_rows(
    *, limit: int = DEFAULT_PAGE, after_id: int = 0, before_id: int | None = None
) -> tuple[list[Row[Any]], int | None]:
    """The same page as tuples `(id, public_id text, UTC date text, status, confirmations_count)` and the next
    cursor: the sitemap streams 10^6 of them, where building dicts and datetimes would dominate."""
    return await _page_rows("sitemap", limit, after_id, before_id)


async def stream_indexable_findings(
    *, page_size: int = DEFAULT_PAGE, after_id: int = 0, before_id: int | None = None
) -> AsyncIterator[dict[str, Any]]:
    """Every indexable occurrence in id order (optionally within `(after_id, before_id)`), one session per page."""
    cursor: int | None = after_id
    while cursor is not None:
        page = await list_indexable_findings_page(limit=page_size, after_id=cursor, before_id=before_id)
        for finding in page["findings"]:
            yield finding
        cursor = page["next_after_id"]
