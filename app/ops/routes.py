"""Operations endpoints: liveness, readiness and Prometheus metrics."""

from __future__ import annotations

import logging

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from app.kernel import db
from app.kernel.metrics import DIRTY_BACKLOG, DIRTY_OLDEST_AGE, OLDEST_REFRESHED_AGE

log = logging.getLogger(__name__)


async def healthz(request: Request) -> Response:
    return PlainTextResponse("ok", headers={"Cache-Control": "no-store"})


async def readyz(request: Request) -> Response:
    from jobs.queue import pool

    checks: dict[str, str] = {}
    try:
        async with db.read_session(replica=False) as session:
            await session.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"error: {type(exc).__name__}"
    try:
        redis = await pool()
        await redis.ping()
        checks["redis"] = "ok"
    except Exception as exc:
        checks["redis"] = f"error: {type(exc).__name__}"
    ok = all(v == "ok" for v in checks.values())
    return JSONResponse(
        {"status": "ok" if ok else "unavailable", "checks": checks},
        status_code=200 if ok else 503,
        headers={"Cache-Control": "no-store"},
    )


# Gauges read at scrape time, one small query each. The dirty-keys table is tiny when the workers keep up;
# min(refreshed_at) reads every pattern row (no index on it in the fixed schema), acceptable at scrape cadence.
_GAUGE_QUERIES = (
    (DIRTY_BACKLOG, "SELECT COUNT(*) FROM infestation_dirty_keys"),
    (DIRTY_OLDEST_AGE, "SELECT EXTRACT(EPOCH FROM now() - MIN(first_dirtied_at)) FROM infestation_dirty_keys"),
    (OLDEST_REFRESHED_AGE, "SELECT EXTRACT(EPOCH FROM now() - MIN(refreshed_at)) FROM infestation_patterns"),
)


async def _refresh_gauges() -> None:
    # the primary: the backlog gauges must not lag behind a replica
    async with db.read_session(replica=False) as session:
        for gauge, sql in _GAUGE_QUERIES:
            value = (await session.execute(text(sql))).scalar()
            gauge.set(float(value or 0))


async def metrics(request: Request) -> Response:
    """Prometheus text exposition of every metric in app.kernel.metrics (and the process defaults)."""
    try:
        await _refresh_gauges()
    except Exception as exc:  # a database outage must not hide the counters; readyz reports it
        log.warning("could not refresh rollup gauges: %s", exc)
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST, headers={"Cache-Control": "no-store"})


routes: list[BaseRoute] = [Route("/healthz", healthz), Route("/readyz", readyz), Route("/metrics", metrics)]
