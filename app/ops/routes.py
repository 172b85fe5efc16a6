"""Operations endpoints: liveness and readiness."""

from __future__ import annotations

from sqlalchemy import text
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from app import db


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


routes: list[BaseRoute] = [Route("/healthz", healthz), Route("/readyz", readyz)]
