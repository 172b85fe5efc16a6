"""What crawlers and feed readers fetch: robots.txt, the sitemaps, the Atom feeds. Mounted before the site routes, so
`/infestations.atom` and `/infestations/{key}.atom` win over the HTML show route."""

from __future__ import annotations

import gzip
import hashlib
import re
from collections.abc import AsyncIterator, Hashable
from datetime import UTC, datetime
from email.utils import format_datetime

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from app.kernel.errors import NotFound
from app.kernel.shared_cache import ATLAS_TAG, SITEMAP_TAG
from app.kernel.web import cache_headers, etag_matches, streamed_document
from app.record.rendered import ATLAS, STATIC, rendered_once
from app.seo import feeds
from app.seo.settings import seo_settings
from app.seo.sitemap import (
    KINDS,
    accepts_gzip,
    child_urlset,
    encode_stream,
    hubs_xml,
    index_children,
    single_urlset,
    sitemapindex_xml,
    use_index,
)

XML_TYPE = "application/xml; charset=utf-8"
ATOM_TYPE = "application/atom+xml; charset=utf-8"
# Shared caches must not keep a takedown alive: every public lifetime is at most 30 s (docs/domain.md §5.7).
SITEMAP_CACHE = "public, max-age=30"
FEED_CACHE = "public, max-age=30"
_PAGE = re.compile(r"[1-9][0-9]{0,8}")

# Crawl traps: keyset "load more" links (`?cursor=`) multiply every list page; the JSON API, htmx fragments,
# moderation and login are not content.
ROBOTS_TXT = """User-agent: *
Allow: /

Disallow: /moderation
Disallow: /login
Disallow: /api/
Disallow: /fragments/
Disallow: /*?cursor=
Disallow: /*&cursor=

Sitemap: {base}/sitemap.xml
"""


async def robots_txt(request: Request) -> Response:
    return PlainTextResponse(
        ROBOTS_TXT.format(base=seo_settings().base_url), headers={"Cache-Control": "public, max-age=3600"}
    )


def _wants_gzip(request: Request) -> bool:
    return accepts_gzip(request.headers.get("accept-encoding", ""))


def _encoded(request: Request) -> Hashable:
    """A sitemap's render-cache key: its path and whether it is sent gzipped (no parameter is read)."""
    return (request.scope["path"], _wants_gzip(request))


def _path(request: Request) -> str:
    path: str = request.scope["path"]  # a feed reads no parameter
    return path


def _small_xml(
    request: Request, body: str, *, last_modified: datetime | None = None, tags: list[str] | None = None
) -> Response:
    """A whole small document with a content ETag (304 on If-None-Match) and gzip when accepted."""
    compress = _wants_gzip(request)
    digest = hashlib.sha256(body.encode()).hexdigest()[:32]
    etag = f'"{digest}-gz"' if compress else f'"{digest}"'  # a strong ETag names one representation
    headers = {"ETag": etag, "Vary": "Accept-Encoding", **cache_headers(SITEMAP_CACHE, tags)}
    if last_modified is not None:
        headers["Last-Modified"] = format_datetime(last_modified.astimezone(UTC), usegmt=True)
    if etag_matches(request, etag):
        return Response(status_code=304, headers=headers)
    content = body.encode()
    if compress:
        content = gzip.compress(content, compresslevel=6)
        headers["Content-Encoding"] = "gzip"
    return Response(content, media_type=XML_TYPE, headers=headers)


async def _streamed_xml(
    request: Request, body_source: AsyncIterator[str], *, tags: list[str] | None = None
) -> Response:
    """Sent once the database answers; a failure mid-stream aborts it, never a short sitemap (docs/reliability.md)."""
    compress = _wants_gzip(request)
    headers = {"Vary": "Accept-Encoding", **cache_headers(SITEMAP_CACHE, tags)}
    if compress:
        headers["Content-Encoding"] = "gzip"
    return await streamed_document(encode_stream(body_source, gzip=compress), media_type=XML_TYPE, headers=headers)


@rendered_once(_encoded)
async def sitemap_xml(request: Request) -> Response:
    cfg = seo_settings()
    if not await use_index():  # names repositories, findings and patterns
        return await _streamed_xml(request, single_urlset(cfg.base_url, cfg.max_urls), tags=[ATLAS_TAG, SITEMAP_TAG])
    children = await index_children()
    times = [c.lastmod for c in children if c.lastmod is not None]
    # the index names no repository or finding, only its child sitemaps and their lastmod: tagged `atlas`, so a
    # shared cache keeps it and every drain batch of the worker purges it
    index = sitemapindex_xml(cfg.base_url, children)
    return _small_xml(request, index, last_modified=max(times) if times else None, tags=[ATLAS_TAG])


@rendered_once(_encoded, scope=STATIC)
async def sitemap_hubs(request: Request) -> Response:
    return _small_xml(request, hubs_xml(seo_settings().base_url))


@rendered_once(_encoded)
async def sitemap_child(request: Request) -> Response:
    kind, page = request.path_params["kind"], request.path_params["page"]
    if kind not in KINDS:
        raise NotFound({"kind": [f"must be one of {', '.join(KINDS)}"]})
    if not _PAGE.fullmatch(page):
        raise NotFound({"page": ["must be a page number from 1 (no leading zeros)"]})
    body = await child_urlset(kind, int(page))
    if body is None:
        raise NotFound({"page": [f"there is no {kind} sitemap page {page}"]})
    # the sitemaps of patterns are atlas pages; those of repositories and findings go with every takedown
    return await _streamed_xml(request, body, tags=[ATLAS_TAG if kind == "infestations" else SITEMAP_TAG])


def _atom(feed: feeds.Feed) -> Response:
    return Response(feeds.render(feed), media_type=ATOM_TYPE, headers=cache_headers(FEED_CACHE, feed.tags))


@rendered_once(_path, scope=ATLAS)
async def infestations_atom(request: Request) -> Response:
    return _atom(await feeds.infestations_feed())


@rendered_once(_path, scope=ATLAS)
async def infestation_atom(request: Request) -> Response:
    feed = await feeds.infestation_feed(request.path_params["pattern_key"])
    if feed is None:
        raise NotFound({"pattern_key": ["no such infestation"]})
    return _atom(feed)


@rendered_once(_path)
async def repository_reports_atom(request: Request) -> Response:
    p = request.path_params
    feed = await feeds.repository_reports_feed(p["host"], p["owner"], p["name"])
    if feed is None:
        raise NotFound({"repository": ["no such public repository"]})
    return _atom(feed)


routes: list[BaseRoute] = [
    Route("/robots.txt", robots_txt, methods=["GET"]),
    Route("/sitemap.xml", sitemap_xml, methods=["GET"]),
    Route("/sitemap/hubs.xml", sitemap_hubs, methods=["GET"]),
    Route("/sitemap/{kind}/{page}.xml", sitemap_child, methods=["GET"]),
    Route("/infestations.atom", infestations_atom, methods=["GET"], name="infestations_atom"),
    Route("/infestations/{pattern_key}.atom", infestation_atom, methods=["GET"]),
    Route("/repos/{host}/{owner}/{name}/reports.atom", repository_reports_atom, methods=["GET"]),
]
