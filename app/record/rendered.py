"""Rendered once per version: an anonymous public page (or twin, feed, sitemap, badge, SARIF log) is kept in this
process's memory under the version of the data it shows and served to every visitor until the version moves
(docs/architecture.md "The kernel's rules in words": caches; docs/scaling.md "Rendered once per version")."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace
from functools import wraps
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from app.kernel import db, flags
from app.kernel.config import render_cache_bytes
from app.kernel.metrics import RENDER_CACHE_BYTES, RENDER_CACHE_EVICTIONS, RENDER_CACHE_REQUESTS
from app.kernel.security import SESSION_COOKIE_NAME
from app.kernel.sql import statement
from app.kernel.web import Parse, Q, View, etag_matches, is_fragment_request, view_of

# Window exits are decided when a page is read (docs/domain.md §5.5): a kept page older than this is rendered again
# even when nothing was written (an age per page, not a clock slice: pages do not all expire at the same instant).
MAX_AGE_SECONDS = 30.0
# One page may take at most this share of the cache (a large sitemap streams past it, never kept).
ENTRY_SHARE = 8
# Every commit that can change a public page moves one of these, each one end of an index (the dirty-key count is
# bounded, so a backlog costs no more than a thousand index entries):
# - takedown: the takedown fence (every takedown is audited, each numbered in commit order: app.kernel.db);
# - changes: the change feed's head (publications, status changes, withdrawals, listings, statements);
# - reports: the newest scan (a report without findings, or on a pending repository, writes no feed entry);
# - refreshed: the newest rollup refresh of a pattern that stays; dirty: refreshes that only delete a pattern
#   (its row leaves the queue).
# A page is kept under the parts its `Scope` names, not all of them (docs/scaling.md "Rendered once per version").
VERSION_SQL = statement(
    "SELECT ({takedown}) AS takedown,"
    " (SELECT max(seq) FROM changes) AS changes,"
    " (SELECT max(id) FROM scans) AS reports,"
    " (SELECT max(refreshed_at) FROM infestation_patterns) AS refreshed,"
    " (SELECT count(*) FROM (SELECT 1 FROM infestation_dirty_keys LIMIT 1000) d) AS dirty",
    takedown=db.TAKEDOWN_FENCE,
)
TAKEDOWN, CHANGES, REPORTS, REFRESHED, DIRTY = range(5)  # VERSION_SQL's columns
_EVERY_PART = (TAKEDOWN, CHANGES, REPORTS, REFRESHED, DIRTY)


@dataclass(frozen=True, slots=True)
class Scope:
    """The parts of the version a route's pages depend on: `rolled` while the rollup read flag is on, `live` while
    it is off (a route that reads the rollup tables then reads the source tables instead)."""

    name: str
    rolled: tuple[int, ...]
    live: tuple[int, ...] = _EVERY_PART

    def of(self, version: tuple[Any, ...], rollup: bool) -> tuple[Any, ...]:
        """The version a page of this scope is kept under."""
        return tuple(version[part] for part in (self.rolled if rollup else self.live))


# Every part: pages that show reports, the feed, or what a report changes at once (the home page, a repository's
# badge, SARIF and feed, the sitemaps, the disclosure ledger, the precision table).
EVERYTHING = Scope("everything", _EVERY_PART)
# Pages read from the rollup tables alone, each row under the read-time guard (app.record.public): a report changes
# them only through the refresh it queues (`refreshed` moves); the guard's inputs move to hidden only through an
# audited action (`takedown`). Not `changes`, `reports` or `dirty`: every report moves those. A refresh that only
# deletes a pattern follows the audited action whose guard already hid it, so it changes none of these pages.
ATLAS = Scope("atlas", (TAKEDOWN, REFRESHED))
# Pages that read nothing a report or a refresh writes (kept until a takedown or MAX_AGE_SECONDS).
STATIC = Scope("static", (TAKEDOWN,), (TAKEDOWN,))

_NOT_IN_304 = frozenset({b"content-type", b"content-length", b"content-encoding"})

Handler = Callable[[Request], Awaitable[Response]]
KeyOf = Callable[[Request], Hashable]
D = TypeVar("D")


@dataclass(frozen=True)
class KeptPage:
    """One rendered 200: its headers (ETag included) and body."""

    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes
    etag: str
    at: float = field(default_factory=time.monotonic)  # when it was rendered

    @property
    def size(self) -> int:
        return len(self.body) + sum(len(k) + len(v) for k, v in self.headers) + 200  # the entry's own overhead


class RenderCache:
    """Kept pages by key, least recently used out first once their bytes pass `max_bytes`."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Hashable, KeptPage] = OrderedDict()
        self._inflight: dict[tuple[int, Hashable], asyncio.Future[KeptPage | None]] = {}
        self._takedown = -1
        self.bytes = 0
        # observability for tests and operators
        self.renders = 0
        self.hits = 0
        self.version_reads = 0  # shared_version() reads that went to the database

    def get(self, key: Hashable) -> KeptPage | None:
        kept = self._entries.get(key)
        if kept is None:
            return None
        if time.monotonic() - kept.at > MAX_AGE_SECONDS:
            del self._entries[key]
            self.bytes -= kept.size
            RENDER_CACHE_BYTES.set(self.bytes)
            return None
        self._entries.move_to_end(key)
        return kept

    def fits(self, size: int) -> bool:
        return size <= self.max_bytes // ENTRY_SHARE

    def put(self, key: Hashable, kept: KeptPage) -> None:
        if not self.fits(kept.size):
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self.bytes -= old.size
        self._entries[key] = kept
        self.bytes += kept.size
        while self.bytes > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self.bytes -= evicted.size
            RENDER_CACHE_EVICTIONS.inc()
        RENDER_CACHE_BYTES.set(self.bytes)

    def saw_takedown(self, marker: int) -> None:
        """A newer takedown makes every kept page unreachable (their keys hold an older marker): free them now."""
        if marker > self._takedown:
            if self._takedown >= 0:
                self.clear()
            self._takedown = marker

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0
        RENDER_CACHE_BYTES.set(0)

    def __len__(self) -> int:
        return len(self._entries)


_cache: RenderCache | None = None


def cache() -> RenderCache | None:
    """This process's render cache (sized by RENDER_CACHE_BYTES when first used); None when it is 0."""
    global _cache
    if _cache is None:
        size = render_cache_bytes()
        if size <= 0:
            return None
        _cache = RenderCache(size)
    return _cache


def reset() -> None:
    """Forget the cache and read RENDER_CACHE_BYTES again (tests)."""
    global _cache
    if _cache is not None:
        _cache.clear()
    _cache = None


async def current_version() -> tuple[tuple[Any, ...], bool]:
    """The data version where this request's reads go, in one statement; and whether it was read on the primary
    while a replica serves public reads (the page is then read from the primary too, so a page is never older
    than the version it is kept under)."""
    if db.reads_use_primary():  # no replica in use: the driver's execute on a pooled connection
        async with db.reader() as read:
            (row,) = await read.rows(VERSION_SQL)
        return tuple(row), False
    async with db.read_session() as session:
        row = (await session.execute(VERSION_SQL)).one()
        on_primary = session.bind is db.engine()
    return tuple(row), on_primary


class _SharedReads:
    """One event loop's version reads for one routing (replica allowed or primary forced): the read running now, and
    the one queued to start when it ends, which every request arriving meanwhile joins."""

    __slots__ = ("queued", "running")

    def __init__(self) -> None:
        self.running: asyncio.Future[tuple[tuple[Any, ...], bool] | None] | None = None
        self.queued: asyncio.Future[tuple[tuple[Any, ...], bool] | None] | None = None


_shared: dict[tuple[int, bool], _SharedReads] = {}


async def shared_version() -> tuple[tuple[Any, ...], bool]:
    """`current_version()`, shared by the requests that wait for it together: a request joins only a read that
    starts after it arrived (the queued one), never the one already running, whose snapshot may predate a takedown
    committed just before this request came in; so a kept page is still never served across a takedown, at the very
    next request (docs/scaling.md "Rendered once per version"). Under load one read answers every request that came
    in during the one before it, instead of one read each."""
    loop = asyncio.get_running_loop()
    group = (id(loop), db.reads_use_primary())
    reads = _shared.get(group)
    if reads is None:
        if len(_shared) > 16:  # event loops of tests that ended
            _shared.clear()
        reads = _shared[group] = _SharedReads()
    if reads.queued is not None:  # starts once the running read ends: after this request arrived
        shared = await asyncio.shield(reads.queued)
        # None: the read failed or its request went away; read for this request (its own outage and retry handling)
        return shared if shared is not None else await current_version()
    mine: asyncio.Future[tuple[tuple[Any, ...], bool] | None] = loop.create_future()
    try:
        if reads.running is not None:
            reads.queued = mine
            await asyncio.wait([reads.running])
            reads.queued = None
        reads.running = mine
        found = await current_version()
        mine.set_result(found)
    finally:
        if reads.queued is mine:
            reads.queued = None
        if reads.running is mine:
            reads.running = None
        if not mine.done():  # failed or cancelled: the joiners read for themselves
            mine.set_result(None)
    store = _cache
    if store is not None:
        store.version_reads += 1
    return found


# Whether a request's session cookie names a live session, judged by the accounts feature
# (`judge_session_cookies`); until one is installed any session cookie counts as signed in.
SignedIn = Callable[[Request], Awaitable[bool]]
_signed_in: SignedIn | None = None


def judge_session_cookies(signed_in: SignedIn) -> None:
    """Install the check of a request's session cookie (app.accounts.sessions installs it as it is imported)."""
    global _signed_in
    _signed_in = signed_in


async def _anonymous(request: Request) -> bool:
    # a session may make the page privileged (moderator markers, the statement form): never kept, never served; a
    # cookie that names no live session (expired, logged out, garbage) is an anonymous visitor's
    if request.method not in ("GET", "HEAD"):
        return False
    if not request.cookies.get(SESSION_COOKIE_NAME):
        return True
    return _signed_in is not None and not await _signed_in(request)


def path_and_query(request: Request) -> Hashable:
    scope = request.scope  # not request.url: building the URL object cost more than the rest of the key
    return (scope["path"], scope["query_string"])


def serve_kept(request: Request, kept: KeptPage) -> Response:
    """The kept page, or a 304 when the client holds it (no rendering either way)."""
    if etag_matches(request, kept.etag):
        response = Response(status_code=304)
        response.raw_headers = [(k, v) for k, v in kept.headers if k not in _NOT_IN_304]
        return response
    response = Response(kept.body)
    response.raw_headers = [(k, v) for k, v in kept.headers if k != b"content-length"] + [
        (b"content-length", str(len(kept.body)).encode())
    ]
    return response


async def _keep(response: Response, limit: int) -> tuple[KeptPage | None, Response]:
    """The response as a KeptPage when it may be shared (a public 200 without cookies, small enough), and the
    response to send now (a stream that ran past `limit` goes on streaming, not kept)."""
    cache_control = response.headers.get("cache-control", "")
    if response.status_code != 200 or not cache_control.startswith("public") or "set-cookie" in response.headers:
        return None, response
    if isinstance(response, StreamingResponse):
        chunks: list[bytes] = []
        size = 0
        source = response.body_iterator.__aiter__()
        async for chunk in source:  # an outage here is raised before any byte went out: a 503, not a short file
            data = chunk.encode(response.charset) if isinstance(chunk, str) else bytes(chunk)
            chunks.append(data)
            size += len(data)
            if size > limit:
                response.body_iterator = _chain(chunks, source)
                return None, response
        body = b"".join(chunks)
    else:
        body = bytes(response.body)
    etag = response.headers.get("etag") or '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
    headers = [(k, v) for k, v in response.raw_headers if k != b"content-length"]
    if "etag" not in response.headers:
        headers.append((b"etag", etag.encode()))
    return KeptPage(headers=tuple(headers), body=body, etag=etag), response


async def _chain(head: list[bytes], rest: AsyncIterator[Any]) -> AsyncIterator[Any]:
    for chunk in head:
        yield chunk
    async for chunk in rest:
        yield chunk


def _without_validators(request: Request) -> Request:
    """The request as the handler sees it on a miss: without If-None-Match, so it renders the 200 that is kept."""
    scope = dict(request.scope)
    scope["headers"] = [(k, v) for k, v in request.scope["headers"] if k != b"if-none-match"]
    return Request(scope, request.receive)


def rendered_once(key: KeyOf = path_and_query, *, scope: Scope = EVERYTHING) -> Callable[[Handler], Handler]:
    """Serve the decorated public route from the render cache (`kept_or_rendered`), the page kept under (route,
    `key(request)`, fragment or not, the rollup read flag) and the parts of the version its `scope` names."""

    def decorate(handler: Handler) -> Handler:
        route = f"{handler.__module__}.{handler.__qualname__}"

        @wraps(handler)
        async def serve(request: Request) -> Response:
            async def key_of() -> tuple[Hashable, bool]:
                rollup = await flags.read_from_rollup()
                return (route, key(request), is_fragment_request(request), rollup), rollup

            return await kept_or_rendered(request, key_of, handler, scope)

        return serve

    return decorate


class PageRoute(Route):
    """A public GET page through `page_route`."""


def page_route(
    path: str,
    *,
    parse: Parse[Q],
    read: Callable[[View[Q]], Awaitable[D]],
    render: Callable[[View[Q], D], Response],
    name: str | None = None,
    scope: Scope = EVERYTHING,
) -> PageRoute:
    """The read side's twin of `app.kernel.intake.body_route`: a GET (and HEAD) whose query is parsed once into one
    typed value (`parse`, in `app.kernel.web.view_of`, with the fragment and rollup flags read once beside it),
    which with the route is the render cache's key (under the parts of the version `scope` names); on a miss
    `read(view)` fetches and `render(view, data)` answers the page, its fragment or its twin. A 4xx of `parse` or
    `read` is the one error path's, never kept."""
    route = f"{render.__module__}.{name or path}"

    async def endpoint(request: Request) -> Response:
        view = await view_of(request, parse)

        async def key_of() -> tuple[Hashable, bool]:
            return (route, view.key), view.rollup

        async def handler(seen: Request) -> Response:
            # on a miss the handler sees the request without its validators (`_without_validators`)
            current = view if seen is request else replace(view, request=seen)
            return render(current, await read(current))

        return await kept_or_rendered(request, key_of, handler, scope)

    return PageRoute(path, endpoint, methods=["GET", "HEAD"], name=name)


async def kept_or_rendered(
    request: Request,
    key_of: Callable[[], Awaitable[tuple[Hashable, bool]]],
    handler: Handler,
    scope: Scope = EVERYTHING,
) -> Response:
    """One version read per request, the page rendered once per (key, its `scope`'s parts of the version) and
    process, and again once it is MAX_AGE_SECONDS old; `key_of()` gives the key and the rollup read flag the page
    is read under. Signed-in requests (a session cookie naming a live session), errors and private answers pass
    through untouched.

    The version's read and the page's reads share one connection (`db.shared_reads()`), handed back once the handler
    has answered: a streamed body is read after that (`_keep`, or as it is sent), each of its reads on its own."""
    store = cache()
    async with AsyncExitStack() as reads:
        await reads.enter_async_context(db.shared_reads())
        if store is None or not await _anonymous(request):
            if store is not None:
                RENDER_CACHE_REQUESTS.labels(outcome="bypass").inc()
            return await handler(request)
        version, on_primary = await shared_version()
        store.saw_takedown(int(version[TAKEDOWN]))
        key, rollup = await key_of()
        full_key = (key, scope.of(version, rollup))
        kept = store.get(full_key)
        if kept is not None:
            store.hits += 1
            RENDER_CACHE_REQUESTS.labels(outcome="hit").inc()
            return serve_kept(request, kept)
        flight = (id(asyncio.get_running_loop()), full_key)
        running = store._inflight.get(flight)
        if running is not None:  # another visitor is rendering this very page: wait for it
            await reads.aclose()
            kept = await asyncio.shield(running)
            if kept is not None:
                store.hits += 1
                RENDER_CACHE_REQUESTS.labels(outcome="hit").inc()
                return serve_kept(request, kept)
            return await handler(request)
        future: asyncio.Future[KeptPage | None] = asyncio.get_running_loop().create_future()
        store._inflight[flight] = future
        kept = None
        try:
            if on_primary:
                with db.primary_reads():
                    response = await handler(_without_validators(request))
            else:
                response = await handler(_without_validators(request))
            await reads.aclose()
            kept, response = await _keep(response, store.max_bytes // ENTRY_SHARE)
        finally:  # waiters get the page, or None and render for themselves
            store._inflight.pop(flight, None)
            future.set_result(kept)
    if kept is None:
        RENDER_CACHE_REQUESTS.labels(outcome="bypass").inc()
        return response
    store.renders += 1
    store.put(full_key, kept)
    RENDER_CACHE_REQUESTS.labels(outcome="miss").inc()
    return serve_kept(request, kept)
