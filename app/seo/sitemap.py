"""Sitemaps (sitemaps.org 0.9): one streamed urlset below the threshold, an index of key-range children above it,
every body from keyset pages (docs/seo.md, docs/domain.md §7.4)."""

from __future__ import annotations

import asyncio
import re
import zlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import quote
from xml.sax.saxutils import escape

from sqlalchemy import literal_column

from app.kernel import db
from app.kernel.cache import SingleFlightCache
from app.kernel.sql import statement
from app.registry.listing import listed_repositories_sitemap_rows
from app.registry.stats import registry_stats
from app.reports.indexable import indexable_findings_page
from app.seo.queries import Bucket, child_buckets, public_pattern_sitemap_rows
from app.seo.settings import CHILD_PAGE_SIZE, PROTOCOL_MAX_URLS, seo_settings, sitemap_cache_ttl

NAMESPACE = "http://www.sitemaps.org/schemas/sitemap/0.9"
XML_DECLARATION = '<?xml version="1.0" encoding="UTF-8"?>\n'
URLSET_OPEN = f'{XML_DECLARATION}<urlset xmlns="{NAMESPACE}">\n'
URLSET_CLOSE = "</urlset>\n"
STREAM_PAGE = 5_000  # rows per read session while streaming
STREAM_FIRST_PAGE = 500
KINDS = ("repos", "findings", "infestations")

# Hubs: the pages a crawler should enter through. They change constantly and have no single honest timestamp,
# so they carry no lastmod (the protocol makes it optional).
HUBS: tuple[tuple[str, str], ...] = (
    ("/", "0.9"),
    ("/infestations", "0.85"),
    ("/disclosures", "0.6"),  # the ledger of coordinated disclosure
    ("/search", "0.5"),
)


def lastmod(at: datetime | str | None) -> str:
    """`<lastmod>` with the UTC date of a real timestamp (or a date the database already formatted)."""
    if at is None:
        return ""
    day = at if isinstance(at, str) else at.astimezone(UTC).date().isoformat()
    return f"<lastmod>{day}</lastmod>"


def url_entry(loc: str, at: datetime | str | None, priority: str) -> str:
    return f"<url><loc>{escape(loc)}</loc>{lastmod(at)}<priority>{priority}</priority></url>\n"


_UNRESERVED = re.compile(r"[A-Za-z0-9._~-]+")


def _segment(part: str) -> str:
    # owner and name are nearly always unreserved characters: skip quote() (the slow path) for them
    return part if _UNRESERVED.fullmatch(part) else quote(part, safe="")


def repository_path(host: str, owner: str, name: str) -> str:
    return f"/repos/{_segment(host)}/{_segment(owner)}/{_segment(name)}"


def hub_entries(base: str) -> list[str]:
    return [url_entry(base + path, None, priority) for path, priority in HUBS]


def repository_entries(base: str, rows: Iterable[Sequence[Any]]) -> list[str]:
    """Rows `(id, host, owner, name, date)`: segments are percent-encoded, then the whole loc XML-escaped."""
    return [url_entry(base + repository_path(host, owner, name), day, "0.8") for _, host, owner, name, day in rows]


def infestation_entries(base: str, rows: Iterable[Sequence[Any]]) -> list[str]:
    """Rows `(pattern_key, date)`: keys are 64 hex characters."""
    prefix = f"<url><loc>{escape(base)}/infestations/"
    return [f"{prefix}{key}</loc>{lastmod(day)}<priority>0.7</priority></url>\n" for key, day in rows]


# Findings are nine URLs in ten of a large sitemap: Postgres renders each page's XML in the page statement and
# sends it as one text value, so this process builds no row objects and no strings per URL (the rows need no
# escaping: a uuid, a date, a constant; the escaped base is a parameter). The priority rule lives here alone:
# verified 0.85, else confirmed at least once 0.75, else 0.65 (a finding not yet assimilated has no canonical).
_FINDING_ENTRY = (
    "'<url><loc>' || :prefix || f.public_id::text || '</loc>' || "
    "coalesce('<lastmod>' || to_char(f.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') || '</lastmod>', '') || "
    "'<priority>' || CASE WHEN c.status = 'verified' THEN '0.85' WHEN c.confirmations_count > 0 THEN '0.75' "
    "ELSE '0.65' END || '</priority></url>' || chr(10)"
)
# `limit + 1` rows are read (the extra one says that another page follows); the page is the first `limit`
_FINDING_PAGE_SQL = """
SELECT count(*), max(id) FILTER (WHERE n <= :limit), string_agg(entry, '' ORDER BY id) FILTER (WHERE n <= :limit)
FROM (SELECT id, entry, row_number() OVER (ORDER BY id) AS n FROM ({rows}) AS fetched) AS page
"""
_FINDING_PAGES = {
    bounded: statement(
        _FINDING_PAGE_SQL,
        rows=indexable_findings_page(literal_column(_FINDING_ENTRY).label("entry"), bounded=bounded),
    )
    for bounded in (False, True)
}


# ---- keyset page walkers: one short read session per page, bounded by an optional key range ----------------

# A walker yields pages `(number of URLs, their XML)`, each URL one `<url>...</url>\n`.
RenderedPage = tuple[int, str]
PageWalker = AsyncGenerator[RenderedPage, None]
Cursor = TypeVar("Cursor")
Fetch = Callable[[Cursor | None, int], Awaitable[tuple[RenderedPage, Cursor | None]]]


def _discard(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: an abandoned prefetch must not log "exception never retrieved"


async def _prefetching(fetch: Fetch[Cursor]) -> PageWalker:
    """Yield rendered pages while the next page's query already runs (its own short session), so Postgres and
    the send overlap. The first page is small, so the first URLs leave quickly."""
    pending: asyncio.Task[tuple[RenderedPage, Cursor | None]] | None = asyncio.ensure_future(
        fetch(None, STREAM_FIRST_PAGE)
    )
    try:
        while pending is not None:
            page, after = await pending
            pending = asyncio.ensure_future(fetch(after, STREAM_PAGE)) if after is not None else None
            yield page
    finally:
        # stopped early (cap reached, client gone): let the one query in flight finish on its own rather than
        # cancel it mid-statement; it only reads and closes its session
        if pending is not None and not pending.done():
            pending.add_done_callback(_discard)


def _joined(entries: list[str], next_cursor: str | None) -> tuple[RenderedPage, str | None]:
    return (len(entries), "".join(entries)), next_cursor


def finding_pages(base: str, lo: int = 0, hi: int | None = None) -> PageWalker:
    prefix = f"{escape(base)}/findings/"

    async def fetch(after: int | None, limit: int) -> tuple[RenderedPage, int | None]:
        params = {"prefix": prefix, "after_id": lo if after is None else after, "before_id": hi}
        async with db.reader() as read:
            [(fetched, last_id, xml)] = await read.rows(
                _FINDING_PAGES[hi is not None], {**params, "limit": limit, "fetch": limit + 1}
            )
        if not fetched:
            return (0, ""), None
        return (min(fetched, limit), xml), last_id if fetched > limit else None

    return _prefetching(fetch)


def repository_pages(base: str, lo: int = 0, hi: int | None = None) -> PageWalker:
    async def fetch(cursor: str | None, limit: int) -> tuple[RenderedPage, str | None]:
        page = await listed_repositories_sitemap_rows(limit=limit, cursor=cursor, after_id=lo, before_id=hi)
        return _joined(repository_entries(base, page["entries"]), page["next_cursor"])

    return _prefetching(fetch)


def infestation_pages(base: str, start: str = "", hi: str | None = None) -> PageWalker:
    async def fetch(cursor: str | None, limit: int) -> tuple[RenderedPage, str | None]:
        page = await public_pattern_sitemap_rows(limit=limit, cursor=cursor, start=start, before=hi)
        return _joined(infestation_entries(base, page["entries"]), page["next_cursor"])

    return _prefetching(fetch)


def _first_entries(xml: str, n: int) -> str:
    """The first `n` URLs of a rendered page (every text node is escaped, so `</url>` only ends an entry)."""
    end = 0
    for _ in range(n):
        end = xml.index("</url>\n", end) + len("</url>\n")
    return xml[:end]


async def urlset_body(sources: list[PageWalker], *, cap: int) -> AsyncIterator[str]:
    """`<urlset>` streamed from page walkers in order, stopping after `cap` URLs."""
    yield URLSET_OPEN
    left = cap
    for source in sources:
        async for count, xml in source:
            if left <= 0:
                break
            if count > left:
                count, xml = left, _first_entries(xml, left)
            left -= count
            if count:
                yield xml
        await source.aclose()
        if left <= 0:
            break
    yield URLSET_CLOSE


async def _hub_pages(base: str) -> PageWalker:
    yield _joined(hub_entries(base), None)[0]


def single_urlset(base: str, cap: int) -> AsyncIterator[str]:
    """Phase A: hubs, findings, repositories, infestation pages in one file."""
    return urlset_body(
        [_hub_pages(base), finding_pages(base), repository_pages(base), infestation_pages(base)], cap=cap
    )


# ---- phase B: the index and its children ----------------------------------------------------------------------

_buckets: SingleFlightCache[list[Bucket]] = SingleFlightCache(sitemap_cache_ttl, maxsize=8)


async def buckets(kind: str) -> list[Bucket]:
    return await _buckets.get(kind, lambda: child_buckets(kind, CHILD_PAGE_SIZE))


def invalidate_buckets() -> None:
    """Forget the child boundaries; the next request waits for new ones (they otherwise age out every
    `SITEMAP_CACHE_TTL` and are recomputed in the background). Test isolation, after truncated tables."""
    _buckets.invalidate()


async def use_index() -> bool:
    """The index at 20,000 listed repositories (docs/domain.md §13 "Sitemap"), or earlier when one urlset could not hold every
    public URL (a small registry with many findings): a crawler must always reach every public page."""
    cfg = seo_settings()
    stats = await registry_stats()
    if int(stats["repositories"]) >= cfg.index_threshold:
        return True
    projected = len(hub_entries(cfg.base_url))
    for kind in KINDS:
        projected += sum(bucket.count for bucket in await buckets(kind))
    return projected > cfg.max_urls


@dataclass(frozen=True)
class ChildRef:
    path: str
    lastmod: datetime | None


async def index_children() -> list[ChildRef]:
    children = [ChildRef("/sitemap/hubs.xml", None)]
    for kind in KINDS:
        for n, bucket in enumerate(await buckets(kind), start=1):
            children.append(ChildRef(f"/sitemap/{kind}/{n}.xml", bucket.lastmod))
    return children


def sitemapindex_xml(base: str, children: list[ChildRef]) -> str:
    parts = [f'{XML_DECLARATION}<sitemapindex xmlns="{NAMESPACE}">\n']
    parts.extend(f"<sitemap><loc>{escape(base + c.path)}</loc>{lastmod(c.lastmod)}</sitemap>\n" for c in children)
    parts.append("</sitemapindex>\n")
    return "".join(parts)


def hubs_xml(base: str) -> str:
    return URLSET_OPEN + "".join(hub_entries(base)) + URLSET_CLOSE


async def child_urlset(kind: str, page: int) -> AsyncIterator[str] | None:
    """The body of `/sitemap/{kind}/{page}.xml`, or None when the page does not exist."""
    pages = await buckets(kind)
    if not 1 <= page <= len(pages):
        return None
    base = seo_settings().base_url
    first = pages[page - 1].first
    following = pages[page].first if page < len(pages) else None
    walker: PageWalker
    if kind == "infestations":
        walker = infestation_pages(base, start=str(first), hi=following)
    elif kind == "repos":
        walker = repository_pages(base, lo=int(first) - 1, hi=following)
    else:
        walker = finding_pages(base, lo=int(first) - 1, hi=following)
    # stale boundaries can let a range grow past 10,000: still a valid file up to the protocol's 50,000
    return urlset_body([walker], cap=PROTOCOL_MAX_URLS)


# ---- gzip for streamed bodies -------------------------------------------------------------------------------


def accepts_gzip(accept_encoding: str) -> bool:
    for part in accept_encoding.split(","):
        token, _, params = part.strip().partition(";")
        if token.strip().lower() in ("gzip", "*"):
            q = params.strip().lower()
            return not (q.startswith("q=") and _q_value(q[2:]) == 0.0)
    return False


def _q_value(raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        return 1.0


async def encode_stream(body: AsyncIterator[str], *, gzip: bool) -> AsyncIterator[bytes]:
    """UTF-8 encode, and gzip when asked, flushing after every chunk so the client sees bytes as pages arrive."""
    if not gzip:
        async for chunk in body:
            yield chunk.encode()
        return
    compressor = zlib.compressobj(5, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    flush: Callable[[int], bytes] = compressor.flush
    async for chunk in body:
        data = compressor.compress(chunk.encode()) + flush(zlib.Z_SYNC_FLUSH)
        if data:
            yield data
    yield flush(zlib.Z_FINISH)
