"""Repository search (`/search`) and its JSON twin, at most SEARCH_RATE_PER_MINUTE a minute per client address."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from app.kernel import ratelimit
from app.kernel.addresses import client_group
from app.kernel.config import search_rate_per_minute
from app.kernel.errors import RateLimited
from app.kernel.ratelimit import Window
from app.kernel.urls import twin_path
from app.kernel.web import error_response, json_twin, page, wants_json
from app.registry import queries
from app.registry.types import Search, public_repository


def _search_limit(raw: str | None) -> int:
    try:
        return max(1, min(int(raw or queries.SEARCH_DEFAULT), queries.SEARCH_MAX))
    except ValueError:
        return queries.SEARCH_DEFAULT


def _search_rate() -> Window:
    return Window("search", search_rate_per_minute(), 60, "at most {limit} searches a minute from one address")


async def search(request: Request) -> Response:
    try:
        await ratelimit.take(_search_rate(), client_group(request.client.host if request.client else None))
    except RateLimited as exc:
        response = error_response(request, exc)
        response.headers["Cache-Control"] = "no-store"  # one address's refusal, never for a shared cache
        return response
    query = queries.normalize_query(request.query_params.get("q", ""))
    limit = _search_limit(request.query_params.get("limit"))
    # one cache entry whoever asks: the answer does not depend on the viewer (docs/security.md "Limits")
    results = await queries.search_repositories(query, limit=limit)
    if wants_json(request):
        return json_twin(Search(query=query, items=[public_repository(r) for r in results]))
    json_url = twin_path(f"/search?{request.query_params}" if request.query_params else "/search")
    context = {"query": query, "results": results, "limit": limit}
    return page(request, "registry/search.html", context, json_url=json_url)


routes: list[BaseRoute] = [Route("/search{format:format}", search, methods=["GET", "HEAD"], name="search")]
