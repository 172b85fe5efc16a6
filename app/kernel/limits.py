"""Bounded requests (docs/security.md): a body limit on every request, JSON bodies read with a byte cap and a
depth bound, and path and query values refused at the edge when they carry text no route could use.

The body limit is pure ASGI: the declared `Content-Length` and the bytes actually streamed are both checked, and
the refusal is raised from `receive`, i.e. inside the route that reads the body, so it is answered by the one
error path (`app.kernel.web.error_response`) like any other error. A route that never reads its body never pays.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

from app.kernel.asgi import HTTPMiddleware
from app.kernel.config import settings
from app.kernel.errors import BadRequest, DomainError, NotFound, ValidationError
from app.kernel.text import UNCLEAN_MESSAGE, is_clean
from app.kernel.web import error_response

# every request outside /api/ is a page, a feed or a small form (the forms have tighter limits: app.kernel.forms)
SITE_BODY_LIMIT = 64 * 1024
MAX_JSON_DEPTH = 32  # a report document is a few levels deep; nothing legitimate comes near this


def body_limit(path: str) -> int:
    """The most bytes a request to `path` may send: the API's REQUEST_BODY_LIMIT (reports carry documents up to
    2,000,000 characters), the site's SITE_BODY_LIMIT everywhere else."""
    return settings().request_body_limit if path.startswith("/api/") else SITE_BODY_LIMIT


def too_large(limit: int) -> DomainError:
    return DomainError(
        {"body": [f"must be at most {limit} bytes"]},
        status_code=413,
        title="Too large",
        message=f"The request body is larger than this address accepts ({limit} bytes).",
    )


class BodyLimitMiddleware(HTTPMiddleware):
    """413 when the declared or the streamed body exceeds `body_limit(path)`."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = body_limit(scope["path"])
        declared = dict(scope["headers"]).get(b"content-length", b"")
        over = declared.isdigit() and len(declared) <= 18 and int(declared) > limit
        received = 0

        async def limited() -> Message:
            nonlocal received
            if over:
                raise too_large(limit)
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise too_large(limit)
            return message

        await self.app(scope, limited, send)


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


def _depth_exceeds(value: Any, maximum: int) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > maximum:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


async def read_json_object(
    request: Request, *, limit: int | None = None, non_object_status: int = 422
) -> dict[str, Any]:
    """The request body as a JSON object: at most `limit` bytes (default: the path's body limit; 413 beyond),
    valid JSON without NaN or Infinity, nested at most MAX_JSON_DEPTH levels (400), an object (`non_object_status`:
    the report API's 422, the repository API's 400, each as documented)."""
    limit = body_limit(request.url.path) if limit is None else limit
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and len(declared) <= 18 and int(declared) > limit:
        raise too_large(limit)
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > limit:
            raise too_large(limit)
    try:
        body = json.loads(bytes(data), parse_constant=_reject_constant)
    except RecursionError:
        raise BadRequest({"body": [f"must be nested at most {MAX_JSON_DEPTH} levels deep"]}) from None
    except ValueError:  # includes JSONDecodeError and UnicodeDecodeError
        raise BadRequest({"body": ["must be valid JSON"]}) from None
    if _depth_exceeds(body, MAX_JSON_DEPTH):
        raise BadRequest({"body": [f"must be nested at most {MAX_JSON_DEPTH} levels deep"]})
    if not isinstance(body, dict):
        raise ValidationError({"body": ["must be a JSON object"]}, status_code=non_object_status)
    return body


class EdgeMiddleware(HTTPMiddleware):
    """Answers `edge_refusal` through the one error path before any route (and so any SQL) runs."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = edge_refusal(scope)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        await error_response(Request(scope, receive), refusal)(scope, receive, send)
