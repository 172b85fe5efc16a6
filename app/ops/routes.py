"""Operations endpoints: liveness, readiness and Prometheus metrics."""

from __future__ import annotations

import logging

from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy import text
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from app.kernel import db, outages
from app.kernel.errors import NotFound, ServiceUnavailable
from app.kernel.metrics import exposition, metrics_allowed
from app.ops.gauges import refresh_gauges_at_most_every_interval
from app.ops.schema import schema_state

log = logging.getLogger(__name__)


async def healthz(request: Request) -> Response:
    return PlainTextResponse("ok", headers={"Cache-Control": "no-store"})


async def readyz(request: Request) -> Response:
    from app.kernel.queue import pool

    checks: dict[str, str] = {}
    try:
        async with db.read_session(replica=False) as session:
            await session.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"error: {type(exc).__name__}"
    warnings: list[str] = []
    if (
        checks["database"] == "ok"
    ):  # a schema behind the code is not ready; ahead (a rolling upgrade) is, with a warning
        try:
            schema = await schema_state()
            checks["schema"] = "ok" if schema.ok else f"error: {schema.describe()}"
            if schema.state == "ahead":
                warnings.append(schema.describe())
        except Exception as exc:
            checks["schema"] = f"error: {type(exc).__name__}"
    try:
        redis = await pool()
        await redis.ping()
        checks["redis"] = "ok"
    except Exception as exc:
        checks["redis"] = f"error: {type(exc).__name__}"
    ok = all(v == "ok" for v in checks.values())
    return JSONResponse(
        {"status": "ok" if ok else "unavailable", "checks": checks, **({"warnings": warnings} if warnings else {})},
        status_code=200 if ok else 503,
        # the failing check names the dependency; Retry-After as on every 503 (docs/reliability.md)
        headers={"Cache-Control": "no-store", **({} if ok else {"Retry-After": str(ServiceUnavailable.RETRY_AFTER)})},
    )


async def metrics(request: Request) -> Response:
    """Prometheus text exposition of every metric in app.kernel.metrics (and the process defaults); with
    `serve --workers N`, summed over the N processes. Only to the addresses in METRICS_ALLOW (others get the
    404 of an unknown path); the database gauges are read at most every 5 s."""
    if not metrics_allowed(request.client.host if request.client else None):
        raise NotFound({"path": ["not found"]}, message="Nothing is published at this address.")
    try:
        await refresh_gauges_at_most_every_interval()
    except Exception as exc:  # a database outage must not hide the counters; readyz reports it
        dependency = outages.dependency_of(exc)
        if dependency is None:
            log.warning("could not refresh rollup gauges: %s", exc)
        else:
            outages.record(dependency, exc, source="metrics")
    return Response(exposition(), media_type=CONTENT_TYPE_LATEST, headers={"Cache-Control": "no-store"})


routes: list[BaseRoute] = [Route("/healthz", healthz), Route("/readyz", readyz), Route("/metrics", metrics)]
