"""app.main.RememberedRoutes: the route an ordered scan picked for a path and method answers the next request for
it directly, with that request's own path parameters; 404s, 405s and mounts still take the router's scan."""

from __future__ import annotations

import re
from typing import Any

import httpx
from starlette.routing import Match

from app.main import RememberedRoutes, app
from e2e.seed import seed_pattern


def remembered() -> RememberedRoutes:
    table = app.router.middleware_stack
    assert isinstance(table, RememberedRoutes)
    return table


async def test_a_remembered_route_answers_with_each_requests_own_parameters(client: httpx.AsyncClient) -> None:
    first = await seed_pattern("Remembered one", repos=2)
    second = await seed_pattern("Remembered two", repos=2, name_prefix="two")
    for seeded in (first, second, first):
        answer = await client.get(f"/infestations/{seeded.key}.json")
        assert answer.status_code == 200 and answer.json()["infestation"]["pattern_key"] == seeded.key
    assert ("/infestations/" + first.key + ".json", "GET") in remembered().known
    assert (await client.get("/infestations/" + first.key)).headers["content-type"].startswith("text/html")
    # the same path with another method is the router's 405 again, a path without a route its 404
    assert (await client.post("/infestations.json")).status_code in (403, 405)  # CSRF may refuse first
    assert (await client.delete("/infestations.json")).status_code == 405
    assert (await client.get("/no-such-page")).status_code == 404
    assert ("/no-such-page", "GET") not in remembered().known
    assert (await client.get("/static/no-such-file.css")).status_code == 404  # a mount: never remembered
    assert not any(path.startswith("/static/") for path, _ in remembered().known)


def test_the_scan_picks_the_route_starlettes_own_scan_picks() -> None:
    """The scan tries only routes whose path starts as the request's does; for a path made from every route (its
    parameters filled in) and each method, it picks the route the router's full ordered scan picks."""
    routes = app.router.routes
    paths = {"/", "/no-such-page", "/static/css/app.css", "/findings/x", "/repos/a/b/c/maintain"}
    for route in routes:
        path = getattr(route, "path", "")
        paths |= {re.sub(r"\{[^}]*\}", filler, path) for filler in ("x", "7", ".json")}
    for path in sorted(paths):
        for method in ("GET", "POST", "DELETE"):
            scope: dict[str, Any] = {"type": "http", "path": path, "method": method, "root_path": "", "headers": []}
            full = next((r for r in routes if r.matches(scope)[0] is Match.FULL), None)
            assert remembered().first_match(scope) is full, (method, path)
