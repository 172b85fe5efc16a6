"""Reads only the crawler surfaces need: child-page boundaries, public infestation keys (docs/seo.md), feed entries."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Row, and_, bindparam, func, select, text

from app.infestations.models import InfestationPattern
from app.kernel import db
from app.kernel.paging import Page, clamp_limit, keyset_page
from app.kernel.sql import compiled, outer, statement
from app.record.public import listed_repository, public_occurrence, visible_pattern
from app.registry.models import Repository


def public_pattern(repo_count: ColumnElement[int], pattern_key: ColumnElement[str]) -> ColumnElement[bool]:
    """`repo_count >= 2`, and still one visible row (the read-time guard, docs/domain.md §5.7): a pattern taken down
    leaves the sitemap at the next request, before its refresh."""
    return and_(repo_count >= 2, visible_pattern(pattern_key))


patterns = InfestationPattern.__table__
PUBLIC_PATTERN = public_pattern(patterns.c.repo_count, patterns.c.pattern_key)


@dataclass(frozen=True)
class Bucket:
    """One child sitemap page: every row with `first <= key < next bucket's first` (the last one is open)."""

    first: Any
    count: int
    lastmod: datetime | None


# the first key of every child page, one pass per kind (docs/seo.md "How child pages are addressed"); the ranges
# partition the key space, so a row is in exactly one child even when the cached boundaries are a little stale
_BUCKETS = {
    "repos": statement(
        """
        SELECT min(id) AS first, count(*) AS count, max(updated_at) AS lastmod FROM (
          SELECT id, updated_at, (row_number() OVER (ORDER BY id) - 1) / :size AS page
          FROM repositories WHERE {listed}
        ) t GROUP BY page ORDER BY page
    """,
        listed=listed_repository(Repository.__table__),
    ),
    "findings": statement(
        """
        SELECT min(id) AS first, count(*) AS count, max(updated_at) AS lastmod FROM (
          SELECT f.id, f.updated_at, (row_number() OVER (ORDER BY f.id) - 1) / :size AS page
          FROM scan_findings f JOIN scans s ON s.id = f.scan_id JOIN repositories r ON r.id = s.repository_id
          WHERE {public}
        ) t GROUP BY page ORDER BY page
    """,
        public=public_occurrence(),
    ),
    "infestations": statement(
        """
        SELECT min(pattern_key) AS first, count(*) AS count, max(updated_at) AS lastmod FROM (
          SELECT pattern_key, updated_at, (row_number() OVER (ORDER BY pattern_key) - 1) / :size AS page
          FROM infestation_patterns p WHERE {public}
        ) t GROUP BY page ORDER BY page
    """,
        public=public_pattern(outer("p.repo_count"), outer("p.pattern_key")),
    ),
}


async def child_buckets(kind: str, size: int) -> list[Bucket]:
    async with db.read_session() as session:
        rows = (await session.execute(_BUCKETS[kind], {"size": size})).mappings().all()
    return [Bucket(first=r["first"], count=int(r["count"]), lastmod=r["lastmod"]) for r in rows]


# a range scan of the primary key
_PATTERN_PAGE_FROM = (
    select(patterns.c.pattern_key, func.to_char(func.timezone("UTC", patterns.c.updated_at), "YYYY-MM-DD"))
    .where(PUBLIC_PATTERN, patterns.c.pattern_key > bindparam("after"), patterns.c.pattern_key >= bindparam("start"))
    .order_by(patterns.c.pattern_key)
    .limit(bindparam("fetch"))
)
_PATTERN_PAGE = compiled(_PATTERN_PAGE_FROM)
_PATTERN_PAGE_BEFORE = compiled(_PATTERN_PAGE_FROM.where(patterns.c.pattern_key < bindparam("before")))


def _key_cursor(row: Row[Any]) -> str:
    return str(row[0])


async def public_pattern_sitemap_rows(
    *, limit: int = 1_000, cursor: str | None = None, start: str = "", before: str | None = None
) -> Page[Row[Any]]:
    """Keyset page of public infestation pages, `start <= key < before`, continuing after `cursor` (the last key
    shown: pattern keys are public hex, so the key is its own cursor), as `(pattern_key, UTC date text of
    updated_at)` tuples."""
    limit = clamp_limit(limit, 5_000)
    query = _PATTERN_PAGE if before is None else _PATTERN_PAGE_BEFORE
    params = {"after": cursor or "", "start": start, "before": before, "fetch": limit + 1}
    async with db.reader() as read:
        rows = await read.rows(query, params)
    return keyset_page(rows, limit, _key_cursor)


_REPOSITORY_SQL = text(
    """
    SELECT id, host, owner, name, canonical_url, listing_status, updated_at, inserted_at
    FROM repositories WHERE host = :host AND owner = :owner AND name = :name
    """
)


async def get_public_repository(host: str, owner: str, name: str) -> dict[str, Any] | None:
    """A repository anonymous visitors may see (listed or pending; quarantined hides the whole record)."""
    async with db.read_session() as session:
        row = (
            (await session.execute(_REPOSITORY_SQL, {"host": host, "owner": owner.lower(), "name": name.lower()}))
            .mappings()
            .first()
        )
    if row is None or row["listing_status"] == "quarantined":
        return None
    return dict(row)


_PUBLIC_REPORTS_SQL = text(
    """
    SELECT s.id, s.commit_sha, s.visibility, s.review_status, s.provenance, s.review_kind, s.model,
           s.findings_count, s.confirmations_count, s.disputes_count, s.inserted_at, s.updated_at
    FROM scans s
    WHERE s.repository_id = :repository_id AND s.visibility IN ('public', 'public_summary')
      AND s.published_at IS NOT NULL
    ORDER BY s.inserted_at DESC, s.id DESC
    LIMIT :limit
    """
)


async def list_public_reports(repository_id: int, *, limit: int = 30) -> list[dict[str, Any]]:
    """Newest reports of one repository that anonymous visitors may see (public and public_summary headers)."""
    async with db.read_session() as session:
        rows = (
            await session.execute(
                _PUBLIC_REPORTS_SQL, {"repository_id": repository_id, "limit": max(1, min(limit, 100))}
            )
        ).mappings()
        return [dict(r) for r in rows]
