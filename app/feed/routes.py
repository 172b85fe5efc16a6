"""`GET /api/v1/changes`: the public change feed (no token), for mirrors that follow the registry incrementally."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from app.feed import queries
from app.feed.types import change_page
from app.kernel.errors import BadRequest
from app.kernel.text import ascii_int
from app.kernel.web import json_twin

# polled by mirrors, and a takedown must show at the next request: shared caches revalidate every time
FEED_CACHE = "no-cache"


def _limit(raw: str | None) -> int:
    if raw is None:
        return queries.DEFAULT_LIMIT
    value = ascii_int(raw)
    if value is None or not 1 <= value <= queries.MAX_LIMIT:
        raise BadRequest({"limit": [f"must be an integer from 1 to {queries.MAX_LIMIT}"]})
    return value


async def changes_api(request: Request) -> Response:
    limit = _limit(request.query_params.get("limit"))
    cursor = request.query_params.get("cursor")
    page = await queries.changes_page(cursor=cursor, limit=limit)  # a malformed cursor is a 400 (InvalidCursor)
    return json_twin(change_page(page), cache=FEED_CACHE)


routes: list[BaseRoute] = [Route("/api/v1/changes", changes_api, methods=["GET"], name="changes")]
