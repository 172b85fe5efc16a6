"""Bounded requests: a body limit on every request, and path and query values refused at the edge (docs/security.md
"Limits"; bodies are read and parsed by `app.kernel.intake`)."""

from __future__ import annotations

from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.kernel.config import settings
from app.kernel.errors import BadRequest, DomainError, NotFound, TooLarge
from app.kernel.text import UNCLEAN_MESSAGE, ascii_int, is_clean
from app.kernel.web import error_response

# every request outside /api/ is a page, a feed or a small form (the forms have tighter limits: app.kernel.forms)
SITE_BODY_LIMIT = 64 * 1024
MAX_JSON_DEPTH = 32  # a report document is a few levels deep; nothing legitimate comes near this
# ~75 ms to parse at worst (docs/security.md); a 4 MiB SARIF log with code flows holds a few tens of thousands
MAX_JSON_CONTAINERS = 200_000
# Values and member names (every string, number, literal, object, array and key the parser builds): ~100 ms to
# parse at worst (an array of floats); the suite's CodeQL log scaled to 4 MiB holds 193,000 pretty-printed and
# 381,000 compact (docs/security.md "Body budget")
MAX_JSON_VALUES = 500_000


def body_limit(path: str) -> int:
    """The most bytes a request to `path` may send: the API's REQUEST_BODY_LIMIT (reports carry documents up to
    2,000,000 characters), the site's SITE_BODY_LIMIT everywhere else."""
    return settings().request_body_limit if path.startswith("/api/") else SITE_BODY_LIMIT


def too_large(limit: int) -> DomainError:
    return TooLarge(
        {"body": [f"must be at most {limit} bytes"]},
        message=f"The request body is larger than this address accepts ({limit} bytes).",
    )


def limited(scope: Scope, receive: Receive) -> Receive:
    """`receive`, raising 413 when the declared or the streamed body exceeds `body_limit(path)` (the route reading
    the body meets it, so it goes through the one error path)."""
    limit = body_limit(scope["path"])
    declared = ascii_int(dict(scope["headers"]).get(b"content-length", b"").decode("latin-1"))
    over = declared is not None and declared > limit
    received = 0

    async def limited_receive() -> Message:
        nonlocal received
        if over:
            raise too_large(limit)
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                raise too_large(limit)
        return message

    return limited_receive


def edge_refusal(scope: Scope) -> DomainError | None:
    """A path or query value no route can use (NUL, control characters, unpaired surrogates): the path is a 404
    (nothing is published there), a query parameter a 400 naming it."""
    if not is_clean(scope["path"], single_line=True):
        return NotFound({"path": ["not found"]}, message="Nothing is published at this address.")
    query = scope.get("query_string", b"").decode("latin-1")
    if query:
        for key, value in parse_qsl(query, keep_blank_values=True):
            if not is_clean(key, single_line=True):
                return BadRequest({"query": [UNCLEAN_MESSAGE]})
            if not is_clean(value):
                return BadRequest({key: [UNCLEAN_MESSAGE]})
    return None


async def bounded(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """`app` with the body limit on `receive`, after `edge_refusal` is answered through the one error path before
    any route (and so any SQL) runs."""
    receive = limited(scope, receive)
    refusal = edge_refusal(scope)
    if refusal is None:
        await app(scope, receive, send)
        return
    await error_response(Request(scope, receive), refusal)(scope, receive, send)
