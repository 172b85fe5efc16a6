"""`GET /api/v1/changes`: the public change feed (no token), for mirrors that follow the registry incrementally."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from app.feed import queries
from app.feed.types import change_page
from app.kernel.paging import strict_limit
from app.kernel.web import json_twin

# polled by mirrors, and a takedown must show at the next request: shared caches revalidate every time
FEED_CACHE = "no-cache"


async def changes_api(request: Request) -> Response:
    limit = strict_limit(request.query_params.get("limit"), default=queries.DEFAULT_LIMIT, maximum=queries.MAX_LIMIT)
    cursor = request.query_params.get("cursor")
    page = await queries.changes_page(cursor=cursor, limit=limit)  # a malformed cursor is a 400 (InvalidCursor)
    return json_twin(change_page(page), cache=FEED_CACHE)


routes: list[BaseRoute] = [Route("/api/v1/changes", changes_api, methods=["GET"], name="changes")]
