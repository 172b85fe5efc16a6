"""Indexable findings: the occurrences of the public join set a crawler may see, as keyset pages and streams
(docs/domain.md §7.1, §7.4)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import ColumnElement, Select, func, select, true

from app.kernel.paging import DEFAULT_PAGE, Page, id_range_page, id_range_select, id_range_statements, stream_entries
from app.kernel.sql import ONE
from app.record.public import public_occurrence
from app.registry.models import Repository
from app.reports.models import CanonicalFinding, Scan, ScanFinding

occurrences = ScanFinding.__table__.alias("f")
_scans, _repositories = Scan.__table__.alias("s"), Repository.__table__.alias("r")
_canonicals = CanonicalFinding.__table__
# the primary key walked from the cursor, each occurrence checked by index lookups (`LIMIT 1`: not flattened into
# hash joins); a page costs what it reads (docs/seo.md "Streaming")
_INDEXABLE = (
    select(ONE)
    .select_from(_scans.join(_repositories, _repositories.c.id == _scans.c.repository_id))
    .where(_scans.c.id == occurrences.c.scan_id, public_occurrence(occurrences, _scans, _repositories))
    .limit(1)
    .lateral("indexable")
)
# the occurrence's canonical (`status`, `confirmations_count`; NULL when not yet assimilated)
canonical = (
    select(_canonicals.c.status, _canonicals.c.confirmations_count)
    .where(_canonicals.c.id == occurrences.c.canonical_finding_id)
    .limit(1)
    .lateral("c")
)


def indexable_findings(*columns: ColumnElement[Any]) -> Select[Any]:
    """`f.id` and `columns` (over `occurrences` and `canonical`) of every indexable occurrence."""
    return select(occurrences.c.id, *columns).select_from(
        occurrences.join(_INDEXABLE, true()).outerjoin(canonical, true())
    )


def indexable_findings_page(*columns: ColumnElement[Any], bounded: bool) -> Select[Any]:
    """The page statement with another select list (the sitemap renders its XML there). Reads `:after_id`,
    `:fetch` (and `:before_id`)."""
    return id_range_select(indexable_findings(*columns), occurrences.c.id, bounded=bounded)


_STATEMENTS = id_range_statements(
    {
        "api": indexable_findings(
            occurrences.c.public_id,
            occurrences.c.updated_at,
            canonical.c.status,
            func.coalesce(canonical.c.confirmations_count, 0).label("confirmations_count"),
        )
    },
    occurrences.c.id,
)


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
