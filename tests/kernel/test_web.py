"""The one format rule (a `.json` suffix on the same route) and the one error path, without a database."""

from __future__ import annotations

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.kernel.errors import DomainError, NotFound, Unauthorized
from app.kernel.web import error_response, wants_json


async def echo(request: Request) -> Response:
    if request.path_params.get("ref") == "missing":
        raise NotFound({"thing": ["not found"]}, message="Nothing here.")
    return JSONResponse({"params": request.path_params, "json": wants_json(request)})


async def api(request: Request) -> Response:
    raise Unauthorized({"authorization": ["required"]})


async def handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, DomainError)
    return error_response(request, exc)


app = Starlette(
    routes=[
        Route("/things/{ref:stem}{format:format}", echo),
        Route("/api/v1/x", api),
    ],
    exception_handlers={DomainError: handler},
)


async def get(path: str) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        return await client.get(path)


async def test_the_json_suffix_selects_the_twin_of_the_same_route() -> None:
    assert (await get("/things/abc")).json() == {"params": {"ref": "abc", "format": ""}, "json": False}
    assert (await get("/things/abc.json")).json() == {"params": {"ref": "abc", "format": ".json"}, "json": True}
    assert (await get("/things/a.json.json")).json()["params"] == {"ref": "a.json", "format": ".json"}


async def test_raised_errors_answer_as_page_or_json_by_the_same_rule() -> None:
    page = await get("/things/missing")
    assert page.status_code == 404 and "text/html" in page.headers["content-type"]
    assert "Nothing here." in page.text and page.headers["Cache-Control"] == "public, max-age=5"
    twin = await get("/things/missing.json")
    assert twin.status_code == 404 and twin.json() == {"errors": {"thing": ["not found"]}}
    assert twin.headers["Cache-Control"] == "public, max-age=5"
    api_error = await get("/api/v1/x")
    assert api_error.status_code == 401 and api_error.json() == {"errors": {"authorization": ["required"]}}
    assert (
        api_error.headers["WWW-Authenticate"] == 'Bearer realm="tarakan"' and "cache-control" not in api_error.headers
    )
