"""The Starlette application: routes are declared as data by each feature and gathered here."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles

from app.kernel import db
from app.kernel.errors import DomainError, RateLimited, Unauthorized
from app.kernel.templating import ROOT


def _routes() -> list[BaseRoute]:
    from app.accounts.routes import routes as account_routes
    from app.infestations.routes import routes as infestation_routes
    from app.moderation.routes import routes as moderation_routes
    from app.ops.routes import routes as ops_routes
    from app.registry.api import routes as registry_api_routes
    from app.registry.routes import routes as registry_routes
    from app.reports.routes import routes as report_routes
    from app.seo.routes import routes as seo_routes
    from app.site.routes import routes as site_routes

    return [
        *ops_routes,
        *seo_routes,
        *account_routes,
        *moderation_routes,
        *registry_api_routes,
        *report_routes,
        *registry_routes,
        *infestation_routes,
        *site_routes,
        Mount("/static", app=StaticFiles(directory=str(ROOT / "static")), name="static"),
    ]


def _middleware() -> list[Middleware]:
    from app.kernel.metrics import ServerTimingMiddleware
    from app.kernel.security import middleware

    return [Middleware(ServerTimingMiddleware), *middleware()]


async def domain_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, DomainError)
    headers: dict[str, str] = {}
    if isinstance(exc, RateLimited):
        headers["Retry-After"] = str(exc.retry_after)
    if isinstance(exc, Unauthorized):
        headers["WWW-Authenticate"] = 'Bearer realm="tarakan"'
    return JSONResponse({"errors": exc.errors}, status_code=exc.status_code, headers=headers)


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    yield
    from jobs.queue import close_pools

    await close_pools()
    await db.dispose_engines()


def create_app() -> Starlette:
    return Starlette(
        routes=_routes(),
        middleware=_middleware(),
        exception_handlers={DomainError: domain_error},
        lifespan=lifespan,
    )


app = create_app()
