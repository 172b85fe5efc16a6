"""Raw SQL for tests: read rows on the primary (never a replica: a test reads what it just wrote), or run one
statement in its own committed transaction."""

from __future__ import annotations

import os
import time
from typing import Any

import httpx
import psycopg
from sqlalchemy import TextClause, text

from app.kernel import db


async def rows(sql: str | TextClause, **params: Any) -> list[dict[str, Any]]:
    statement = text(sql) if isinstance(sql, str) else sql
    async with db.read_session(replica=False) as session:
        return [dict(r) for r in (await session.execute(statement, params)).mappings().all()]


async def one(sql: str | TextClause, **params: Any) -> dict[str, Any] | None:
    found = await rows(sql, **params)
    return found[0] if found else None


async def scalar(sql: str, **params: Any) -> Any:
    async with db.read_session(replica=False) as session:
        return (await session.execute(text(sql), params)).scalar()


async def execute(sql: str, **params: Any) -> None:
    async with db.transaction() as session:
        await session.execute(text(sql), params)


async def get_while_locked(client: httpx.AsyncClient, path: str, table: str) -> tuple[httpx.Response, float]:
    """GET `path` while another connection holds `table` exclusively; the answer and the seconds it took."""
    url = os.environ["DATABASE_URL"].replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url) as blocker:
        blocker.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        response = await client.get(path)
        waited = time.monotonic() - started
        blocker.rollback()
    return response, waited
