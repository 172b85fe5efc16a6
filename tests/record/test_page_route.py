"""One typed path for a public page (issue 35 item 2; app.record.rendered.page_route): the query is parsed once per
request into one hashable value, which is the render cache's key; a bad query is the one error path's 4xx."""

from __future__ import annotations

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from app.kernel.errors import BadRequest, DomainError
from app.kernel.web import PUBLIC_CACHE, View, error_response
from app.record.rendered import PageRoute, page_route
from tests.routes import flat_routes

pytestmark = pytest.mark.usefixtures("fresh_render_cache")


def test_the_atlas_pages_go_through_page_route() -> None:
    paths = {route.path for route in flat_routes() if isinstance(route, PageRoute)}
    assert {
        "/infestations{format:format}",
        "/infestations/{pattern_key}/instances{format:format}",
        "/infestations/{pattern_key:stem}{format:format}",
    } <= paths


async def test_the_query_is_parsed_once_a_request_and_two_addresses_of_one_query_are_one_kept_page() -> None:
    parsed: list[str] = []
    reads: list[int] = []

    def parse(request: Request, rollup: bool) -> int:
        raw = request.query_params.get("n", "1")
        if not raw.isdigit():
            raise BadRequest({"n": ["must be a whole number"]})
        parsed.append(raw)
        return min(int(raw), 10)

    async def read(view: View[int]) -> int:
        reads.append(view.query)
        return view.query * 2

    def render(view: View[int], doubled: int) -> Response:
        return PlainTextResponse(f"{view.query} {doubled} {view.as_json}", headers={"Cache-Control": PUBLIC_CACHE})

    site = Starlette(
        routes=[page_route("/t{format:format}", parse=parse, read=read, render=render)],
        exception_handlers={DomainError: error_response},  # type: ignore[dict-item]
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=site), base_url="http://test") as client:
        clamped, exact = await client.get("/t.json?n=12"), await client.get("/t.json?n=10")
        bad = await client.get("/t.json?n=ten")
    assert clamped.text == exact.text == "10 20 True"
    assert parsed == ["12", "10"]  # once a request: the key and the read share it
    assert reads == [10]  # n=12 clamps to n=10: the second request is the kept page
    assert bad.status_code == 400 and bad.json() == {"errors": {"n": ["must be a whole number"]}}
