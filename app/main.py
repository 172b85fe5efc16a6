"""The Starlette application: routes are declared as data by each feature and gathered here."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.exc import DataError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Mount, Route, Router
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from app.kernel import db, heap, metrics, outages, urls, watchdog
from app.kernel.errors import BadRequest, DomainError, NotFound
from app.kernel.templating import ROOT
from app.kernel.web import error_response, unavailable_response
from app.record.rendered import PageRoute

logger = logging.getLogger(__name__)


def _routes() -> list[BaseRoute]:
    from app.accounts.routes import routes as account_routes
    from app.disclosure.routes import routes as disclosure_routes
    from app.exports.routes import routes as export_routes
    from app.feed.routes import routes as feed_routes
    from app.infestations.routes import routes as infestation_routes
    from app.maintainers.routes import routes as maintainer_routes
    from app.maintainers.statement_routes import routes as statement_routes
    from app.maintainers.webhook_routes import routes as webhook_routes
    from app.moderation.routes import routes as moderation_routes
    from app.ops.routes import routes as ops_routes
    from app.registry.api import routes as registry_api_routes
    from app.registry.routes import routes as registry_routes
    from app.reports.routes import routes as report_routes
    from app.seo.routes import routes as seo_routes
    from app.site.routes import routes as site_routes
    from app.trust.routes import routes as trust_routes

    return [
        *ops_routes,
        *seo_routes,
        *account_routes,
        *moderation_routes,
        *registry_api_routes,
        *feed_routes,
        *disclosure_routes,
        *report_routes,
        *maintainer_routes,
        *statement_routes,
        *webhook_routes,
        *registry_routes,
        *infestation_routes,
        *site_routes,
        *trust_routes,
        *export_routes,
        Mount("/static", app=StaticFiles(directory=str(ROOT / "static")), name="static"),
    ]


def _middleware() -> list[Middleware]:
    from app.kernel.asgi import Front

    return [Middleware(Front)]  # one layer, each concern a step in it (app.kernel.asgi)


async def domain_error(request: Request, exc: Exception) -> Response:
    """The one error path: every raised DomainError, as the HTML error page or the JSON shape (app.kernel.web)."""
    assert isinstance(exc, DomainError)
    return error_response(request, exc)


async def dependency_failure(request: Request, exc: Exception) -> Response:
    """Postgres or Redis away or too slow: a 503 with Retry-After through the one error path, one log line per
    interval and a counter (app.kernel.outages, docs/reliability.md). Anything else of these types is a bug."""
    dependency = outages.dependency_of(exc)
    if dependency is None:
        raise exc
    outages.record(dependency, exc, source="request")
    return unavailable_response(request, dependency)


async def data_error(request: Request, exc: Exception) -> Response:
    """A value the database refused (NUL in text, a number out of range...): a validation is missing at the edge.
    The client gets a 400 through the one error path; the log gets an error with the traceback to fix it."""
    logger.error("database refused a value: a validation is missing (docs/security.md)", exc_info=exc)
    return error_response(request, BadRequest({"request": ["contains a value the registry cannot store"]}))


async def routing_error(request: Request, exc: Exception) -> Response:
    """The router's own 404 (no route) and 405 (wrong method) through the same error path: the site's HTML
    page, or the JSON shape for `/api/...` and machine documents (docs/domain.md §6.1)."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        error: DomainError = DomainError(
            {"method": [f"{request.method} is not allowed here"]},
            status_code=405,
            title="Method not allowed",
            message=f"This address does not answer {request.method} requests.",
        )
    else:
        error = NotFound({"path": ["not found"]}, message="Nothing is published at this address.")
    response = error_response(request, error)
    response.headers.update(exc.headers or {})  # `Allow` on a 405
    return response


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    db.limit_statements()  # the server's statements are capped (DB_STATEMENT_TIMEOUT, docs/reliability.md)
    await db.warm_pools()  # answers only once its connections are open (docs/scaling.md "A process answers warm")
    watchdog.start()  # event-loop lag on /metrics, and a line naming the route of any stall
    heap.settle()  # the imported code out of the collector's sight; fewer young collections
    yield
    await watchdog.stop()
    from app.forge import http as forge_http
    from app.kernel.queue import close_pools

    await forge_http.close()
    await close_pools()
    await db.dispose_engines()
    metrics.process_exit()  # serve --workers N: this process's live samples leave the sum


class RememberedRoutes:
    """Starlette's router tries its routes in order, a regex each: a tenth of a cached page's CPU. The route an
    ordered scan picked for a path and method is remembered (a bounded table: routes match on the path and method
    alone), so the next request for it goes straight there; anything else (a 404, a 405, a redirect, a mount, a
    root path) takes the router's own scan, unchanged. The scan itself (every path a crawler walks is new) tries
    only the routes whose path starts as the request's does: a finding page's route is the 67th of 78, 28 us
    of `matches()` calls a request, 6 us so."""

    SIZE = 4096

    def __init__(self, router: Router) -> None:
        self.router = router
        self.known: dict[tuple[str, str], Route] = {}
        self._ordered: list[tuple[str, BaseRoute]] = []  # each route with its path's text before any parameter

    def _scan_order(self) -> list[tuple[str, BaseRoute]]:
        if len(self._ordered) != len(self.router.routes):  # routes added after start (tests)
            self._ordered = [(getattr(r, "path", "").partition("{")[0], r) for r in self.router.routes]
        return self._ordered

    def first_match(self, scope: Scope) -> BaseRoute | None:
        """The router's rule, the first route that fully matches, tried only where the route's path starts as the
        request's does."""
        path = scope["path"]
        for prefix, candidate in self._scan_order():
            if path.startswith(prefix) and candidate.matches(scope)[0] is Match.FULL:
                return candidate
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("root_path"):
            await self.router.app(scope, receive, send)
            return
        key = (scope["path"], scope["method"])
        route = self.known.get(key)
        if route is None:
            candidate = self.first_match(scope)
            if isinstance(candidate, Route) and type(candidate) in (Route, PageRoute):
                if len(self.known) >= self.SIZE:
                    self.known.clear()
                route = self.known[key] = candidate
        if route is None:
            await self.router.app(scope, receive, send)
            return
        _, child_scope = route.matches(scope)  # this request's own path parameters
        scope.setdefault("router", self.router)
        scope["route"] = route
        scope.update(child_scope)
        await route.handle(scope, receive, send)


def create_app() -> Starlette:
    app = Starlette(
        routes=_routes(),
        middleware=_middleware(),
        exception_handlers={
            DomainError: domain_error,
            DataError: data_error,
            404: routing_error,
            405: routing_error,
            **dict.fromkeys(outages.OUTAGE_ERRORS, dependency_failure),
        },
        lifespan=lifespan,
    )
    urls.install(app.router)  # path_for builds any named route
    app.router.middleware_stack = RememberedRoutes(app.router)
    return app


app = create_app()
