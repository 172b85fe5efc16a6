"""Indexable findings: the occurrences a crawler may see (docs/domain.md §7.4).

An occurrence is indexable when it is in the public join set (`app.kernel.public`): its report is `public` (not
`public_summary`, not `restricted`) and its repository is `listed`. Pages are keyset by occurrence id ascending (the primary key), at most 5,000 rows; a stream opens one
short read session per page.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from app.kernel.paging import DEFAULT_PAGE, Page, id_range_page, id_range_statements, stream_entries
from app.kernel.public import PUBLIC_JOIN

# Walks the primary key from the cursor and checks each occurrence with index lookups, so a page costs what it
# reads whatever the table sizes. `LIMIT 1` keeps the LATERAL subqueries from being flattened into joins the
# planner could turn into hash joins over every scan and repository on every page.
_PAGE_SQL = f"""
SELECT {{columns}}
FROM scan_findings f
CROSS JOIN LATERAL (
  SELECT 1 FROM scans s JOIN repositories r ON r.id = s.repository_id
  WHERE s.id = f.scan_id AND {PUBLIC_JOIN} LIMIT 1
) AS indexable
LEFT JOIN LATERAL (
  SELECT status, confirmations_count FROM canonical_findings WHERE id = f.canonical_finding_id LIMIT 1
) AS c ON true
WHERE f.id > :after_id {{before}}
ORDER BY f.id
LIMIT :fetch
"""
_BEFORE = "AND f.id < :before_id"
_STATEMENTS = id_range_statements(
    _PAGE_SQL,
    {
        "api": "f.id, f.public_id, f.updated_at, c.status, coalesce(c.confirmations_count, 0) AS confirmations_count",
    },
    before=_BEFORE,
)


def indexable_findings_page_sql(columns: str, *, bounded: bool) -> str:
    """The page statement with another select list over `f` (the occurrence) and `c` (its canonical's `status`,
    `confirmations_count`): the sitemap renders its XML there. Reads `:after_id`, `:fetch` (and `:before_id`)."""
    return _PAGE_SQL.format(columns=columns, before=_BEFORE if bounded else "")


async def list_indexable_findings_page(
    *, limit: int = DEFAULT_PAGE, cursor: str | None = None, after_id: int = 0, before_id: int | None = None
) -> Page[dict[str, Any]]:
    """One page `{"entries", "next_cursor"}` of indexable occurrences with `after_id < id < before_id`, id
    ascending, continuing after `cursor`. Entries: `id, public_id, updated_at, status` (the canonical's, None if
    not yet assimilated), `confirmations_count` (the canonical's)."""
    page = await id_range_page(_STATEMENTS, "api", limit=limit, cursor=cursor, after_id=after_id, before_id=before_id)
    return {"entries": [row._asdict() for row in page["entries"]], "next_cursor": page["next_cursor"]}


def stream_indexable_findings(*, page_size: int = DEFAULT_PAGE) -> AsyncIterator[dict[str, Any]]:
    """Every indexable occurrence in id order, one short read session per page."""
    return stream_entries(lambda cursor: list_indexable_findings_page(limit=page_size, cursor=cursor))
