"""Repository search (`/search`) and its JSON twin."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from app.accounts.sessions import session_token
from app.kernel.urls import twin_path
from app.kernel.web import json_twin, page, wants_json
from app.registry import queries
from app.registry.types import Search, public_repository


def _search_limit(raw: str | None) -> int:
    try:
        return max(1, min(int(raw or queries.SEARCH_DEFAULT), queries.SEARCH_MAX))
    except ValueError:
        return queries.SEARCH_DEFAULT


async def search(request: Request) -> Response:
    query = queries.normalize_query(request.query_params.get("q", ""))
    limit = _search_limit(request.query_params.get("limit"))
    # only a request without a session cookie shares the search cache (docs/security.md "Limits")
    results = await queries.search_repositories(query, limit=limit, anonymous=session_token(request) is None)
    if wants_json(request):
        return json_twin(Search(query=query, items=[public_repository(r) for r in results]))
    json_url = twin_path(f"/search?{request.query_params}" if request.query_params else "/search")
    context = {"query": query, "results": results, "limit": limit}
    return page(request, "registry/search.html", context, json_url=json_url)


routes: list[BaseRoute] = [Route("/search{format:format}", search, methods=["GET", "HEAD"], name="search")]
