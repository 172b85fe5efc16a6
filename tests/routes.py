"""The app's router as a flat list, for tests that check a rule over every route."""

from __future__ import annotations

from starlette.routing import BaseRoute, Mount, Route


def flat_routes(routes: list[BaseRoute] | None = None) -> list[Route]:
    """Every `Route` of `routes` (default: the app's router), mounts walked."""
    if routes is None:
        from app.main import app

        routes = list(app.routes)
    found: list[Route] = []
    for route in routes:
        if isinstance(route, Mount):
            found.extend(flat_routes(list(route.routes)))
        elif isinstance(route, Route):
            found.append(route)
    return found
