"""Rendering a page or its JSON twin, the one format rule, and the one error path (docs/architecture.md "The
kernel's rules in words": pages and twins)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterable, Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.types import Send

from app.kernel import db, flags, outages
from app.kernel.answers import Answer, Errors, answer_response
from app.kernel.errors import DomainError, ServiceUnavailable
from app.kernel.shared_cache import xkey_headers
from app.kernel.templating import templates

PUBLIC_CACHE = "public, max-age=30"
# A page that names what it shows (xkey tags) may stay this long in the shared cache, which purges its tags at every
# takedown; browsers still keep it `max-age` (docs/scaling.md "Shared cache"). An untagged page never promises it.
SHARED_MAX_AGE = 300
SHARED_CACHE = f"{PUBLIC_CACHE}, s-maxage={SHARED_MAX_AGE}"
ERROR_CACHE = "public, max-age=5"
PRIVATE_CACHE = "private, no-store"  # what a privileged viewer sees must never sit in a shared cache

JSON_SUFFIX = ".json"
# Documents for machines (feeds, sitemaps) answer their errors in JSON like the API does; a 503 there is plain
# text (a crawler reads the status and Retry-After, docs/reliability.md).
_DOCUMENT_SUFFIXES = (".xml", ".atom", ".txt", ".sarif", ".gz")  # .gz: the bulk export files
_MACHINE_SUFFIXES = (JSON_SUFFIX, *_DOCUMENT_SUFFIXES)


class _StemConvertor(Convertor[str]):
    """One path segment, matched lazily so a following `{format}` can take a `.json` suffix."""

    regex = "[^/]+?"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


class _FormatConvertor(Convertor[str]):
    """`""` (the HTML page) or `".json"` (its twin)."""

    regex = r"(?:\.json)?"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


class _TwinConvertor(_FormatConvertor):
    """Only `".json"`: for a twin whose page lives elsewhere (`/index.json` is the twin of `/`)."""

    regex = r"\.json"


register_url_convertor("stem", _StemConvertor())
register_url_convertor("format", _FormatConvertor())
register_url_convertor("twin", _TwinConvertor())


def etag_matches(request: Request, etag: str) -> bool:
    """`If-None-Match` names this representation (weak comparison, RFC 9110 §13.1.2; `*` matches any)."""
    header = request.headers.get("if-none-match")
    if not header:
        return False
    tags = {tag.strip().removeprefix("W/") for tag in header.split(",")}
    return "*" in tags or etag.removeprefix("W/") in tags


def cache_headers(cache: str, tags: Iterable[str] | None = None) -> dict[str, str]:
    """Cache-Control, and for a public answer that names what it shows its `xkey` tags with `s-maxage`, so a shared
    cache keeps it until a takedown purges one of the tags. A private answer (a privileged viewer's) never carries
    tags: the shared cache stores only tagged answers."""
    tag_list = list(tags or ())
    if not tag_list or not cache.startswith("public") or "s-maxage" in cache:
        return {"Cache-Control": cache}
    return {"Cache-Control": f"{cache}, s-maxage={SHARED_MAX_AGE}", **xkey_headers(tag_list)}


def document_response(
    request: Request,
    body: bytes,
    media_type: str,
    *,
    cache: str = PUBLIC_CACHE,
    headers: Mapping[str, str] = {},
    tags: Iterable[str] | None = None,
) -> Response:
    """A whole small document with a content ETag: 304 when the client holds it already."""
    etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
    all_headers = {"ETag": etag, **cache_headers(cache, tags), **headers}
    if etag_matches(request, etag):
        return Response(status_code=304, headers=all_headers)
    return Response(body, media_type=media_type, headers=all_headers)


def wants_json(request: Request) -> bool:
    """The one format rule: the route's `.json` suffix, or an API path."""
    if "format" in request.path_params:
        return bool(request.path_params["format"] == JSON_SUFFIX)
    return request.url.path.startswith("/api/")


def _error_wants_json(request: Request) -> bool:
    if "format" in request.path_params:
        return wants_json(request)
    path = request.url.path
    return path.startswith("/api/") or path.endswith(_MACHINE_SUFFIXES)


class _Viewing(Protocol):
    @property
    def privileged(self) -> bool: ...


def cache_for(viewer: _Viewing) -> str:
    return PRIVATE_CACHE if viewer.privileged else PUBLIC_CACHE


# every header `is_fragment_request` reads: a shared cache must not serve a fragment as the page, or the reverse
VARY_HX = "HX-Request, HX-History-Restore-Request"


def is_fragment_request(request: Request) -> bool:
    """An htmx swap asks for the fragment; a history restore (back button, cache miss) needs the full page."""
    return request.headers.get("HX-Request") == "true" and request.headers.get("HX-History-Restore-Request") != "true"


Q = TypeVar("Q", bound=Hashable)


@dataclass(frozen=True, slots=True)
class View(Generic[Q]):
    """One GET of a public page as read once, at its door (`view_of`), and handed down: its typed query, the format,
    whether htmx asks for the fragment, and the rollup read flag (docs/architecture.md "A request from route to SQL")."""

    request: Request
    query: Q
    as_json: bool
    fragment: bool
    rollup: bool

    @property
    def key(self) -> Hashable:
        """What the page shows, for the render cache: the path (its `.json` and path parameters), the parsed query,
        fragment or page, and the flag."""
        return (self.request.scope["path"], self.query, self.fragment, self.rollup)


# `parse(request, rollup)`: the query as one hashable value (an error raised here is the page's 4xx)
Parse = Callable[[Request, bool], Q]


async def view_of(request: Request, parse: Parse[Q]) -> View[Q]:
    rollup = await flags.read_from_rollup()
    return View(request, parse(request, rollup), wants_json(request), is_fragment_request(request), rollup)


def alternate_link(json_url: str) -> str:
    return f'<{json_url}>; rel="alternate"; type="application/json"'


def page(
    request: Request,
    name: str,
    context: dict[str, Any],
    *,
    status_code: int = 200,
    json_url: str | None = None,
    vary_hx: bool = False,
    cache: str | None = PUBLIC_CACHE,
    tags: Iterable[str] | None = None,
) -> Response:
    """A template page. `cache=None` leaves Cache-Control to the middleware (console and login pages); `tags` name
    what it shows for the shared cache (`cache_headers`)."""
    headers = cache_headers(cache, tags) if cache is not None else {}
    context = {**context, "json_url": json_url}  # the layout announces it in <head> too
    if json_url is not None:
        headers["Link"] = alternate_link(json_url)
    if vary_hx:
        headers["Vary"] = VARY_HX
    return templates.TemplateResponse(request, name, context, status_code=status_code, headers=headers)


def json_twin(
    data: Answer, *, status_code: int = 200, cache: str = PUBLIC_CACHE, tags: Iterable[str] | None = None
) -> Response:
    return answer_response(data, status_code=status_code, headers=cache_headers(cache, tags))


def error_response(request: Request, exc: DomainError) -> Response:
    """The one answer to a raised error: the JSON shape for twins, the API and machine documents, else the
    site's error page. Public twins and pages are cached briefly; API answers carry no cache header. A 503
    (`ServiceUnavailable`) is never cached, always says `Retry-After`, and is plain text for feeds and sitemaps."""
    headers = exc.headers()
    if isinstance(exc, ServiceUnavailable) and request.url.path.endswith(_DOCUMENT_SUFFIXES):
        return PlainTextResponse(f"{exc.title}: {exc.message}\n", status_code=exc.status_code, headers=headers)
    if _error_wants_json(request):
        if "format" in request.path_params:
            headers.setdefault("Cache-Control", ERROR_CACHE)
        return answer_response(Errors(errors=exc.errors), status_code=exc.status_code, headers=headers)
    context = {"status_code": exc.status_code, "heading": exc.title, "message": exc.message}
    response = page(request, "site/error.html", context, status_code=exc.status_code, cache=ERROR_CACHE)
    headers.pop("WWW-Authenticate", None)  # a page's way to authenticate is the login link it shows
    response.headers.update(headers)
    return response


_UNAVAILABLE_MESSAGES = {
    "database": "The registry lost its database for a moment. Nothing you sent was half-written: try again in a few "
    "seconds.",
    "redis": "The registry lost its job queue for a moment. Nothing you sent was half-written: try again in a few "
    "seconds.",
}


def unavailable_response(request: Request, dependency: str) -> Response:
    """The 503 for a dependency outage (`app.kernel.outages`), through the one error path."""
    exc = ServiceUnavailable(
        {dependency: ["is temporarily unavailable; try again shortly"]},
        message=_UNAVAILABLE_MESSAGES.get(dependency),
    )
    return error_response(request, exc)


class _AbortableStream(StreamingResponse):
    """A streamed document that is never passed off as complete: when its source fails after the 200 went out,
    the response ends without its last chunk (the server closes the connection, so the client sees a broken
    transfer, not a short document) and the failure is one log line (an outage: counted and throttled)."""

    async def stream_response(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        try:
            async for chunk in self.body_iterator:
                body = chunk if isinstance(chunk, bytes | memoryview) else chunk.encode(self.charset)
                await send({"type": "http.response.body", "body": body, "more_body": True})
        except Exception as exc:
            dependency = outages.dependency_of(exc)
            if dependency is None:
                raise  # a bug: the traceback is logged and the connection is closed all the same
            outages.record(dependency, exc, source="stream")
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def streamed_document(
    source: AsyncIterable[bytes | str], *, media_type: str, headers: Mapping[str, str] | None = None
) -> Response:
    """A streamed 200, sent only once the database answers (else the outage raises here and is a 503); a failure
    in the middle of the stream aborts it (`_AbortableStream`)."""
    await db.ping()
    return _AbortableStream(source, media_type=media_type, headers=headers)
