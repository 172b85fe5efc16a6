"""Indexable findings: the occurrences of the public join set a crawler may see, as keyset pages and streams
(docs/domain.md §7.1, §7.4)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import ColumnElement, Select, func, select, true

from app.kernel.paging import DEFAULT_PAGE, Page, id_range_page, id_range_select, id_range_statements, stream_entries
from app.kernel.sql import ONE
from app.record.public import public_join
from app.registry.models import Repository
from app.reports.models import CanonicalFinding, Scan, ScanFinding

F = ScanFinding.__table__.alias("f")  # the occurrence
_S, _R, _C = Scan.__table__.alias("s"), Repository.__table__.alias("r"), CanonicalFinding.__table__
# the primary key walked from the cursor, each occurrence checked by index lookups (`LIMIT 1`: not flattened into
# hash joins); a page costs what it reads (docs/seo.md "Streaming")
_INDEXABLE = (
    select(ONE)
    .select_from(_S.join(_R, _R.c.id == _S.c.repository_id))
    .where(_S.c.id == F.c.scan_id, public_join(_S, _R))
    .limit(1)
    .lateral("indexable")
)
# the occurrence's canonical (`status`, `confirmations_count`; NULL when not yet assimilated)
C = select(_C.c.status, _C.c.confirmations_count).where(_C.c.id == F.c.canonical_finding_id).limit(1).lateral("c")


def indexable_findings(*columns: ColumnElement[Any]) -> Select[Any]:
    """`f.id` and `columns` (over `F` and `C`) of every indexable occurrence."""
    return select(F.c.id, *columns).select_from(F.join(_INDEXABLE, true()).outerjoin(C, true()))


def indexable_findings_page(*columns: ColumnElement[Any], bounded: bool) -> Select[Any]:
    """The page statement with another select list (the sitemap renders its XML there). Reads `:after_id`,
    `:fetch` (and `:before_id`)."""
    return id_range_select(indexable_findings(*columns), F.c.id, bounded=bounded)


_STATEMENTS = id_range_statements(
    {
        "api": indexable_findings(
            F.c.public_id,
            F.c.updated_at,
            C.c.status,
            func.coalesce(C.c.confirmations_count, 0).label("confirmations_count"),
        )
    },
    F.c.id,
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
