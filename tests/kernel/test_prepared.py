"""Prepared statements on direct connections (app/kernel/db.py `_engine_for`): a statement prepared on a pooled
connection whose result type a schema change moved (a migration run while the process serves) fails once, which
drops the pool's connections, and runs again at the next try instead of failing on that connection for good."""

from __future__ import annotations

import os

import psycopg
import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy import text

from app.kernel import db
from tests.sql import scalar

PROBE = text("SELECT v FROM prepared_probe WHERE id = :id")


async def _probe(times: int) -> object:
    async with db.read_session(replica=False) as session:  # one connection: prepared from its 5th use
        for _ in range(times):
            value = (await session.execute(PROBE, {"id": 1})).scalar_one()
    return value


async def test_a_result_type_changed_under_a_prepared_statement_fails_once_then_runs() -> None:
    url = os.environ["DATABASE_URL"].replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url, autocommit=True) as other:  # the schema change comes from another process
        other.execute("CREATE TABLE prepared_probe (id bigint PRIMARY KEY, v integer)")
        try:
            other.execute("INSERT INTO prepared_probe VALUES (1, 7)")
            assert await _probe(db.PREPARE_AFTER + 1) == 7
            # still planned for its parameters each time: no generic plan for a skewed pattern key
            assert await scalar("SHOW plan_cache_mode") == "force_custom_plan"
            other.execute("ALTER TABLE prepared_probe ALTER COLUMN v TYPE text")
            with pytest.raises(sa_exc.DBAPIError, match="cached plan must not change result type") as failed:
                await _probe(1)
            assert failed.value.connection_invalidated  # a public read that fails so runs once more (read_session)
            assert await _probe(db.PREPARE_AFTER + 1) == "7"
        finally:
            await db.dispose_engines()
            other.execute("DROP TABLE prepared_probe")
