"""Prepared statements on direct connections (app/kernel/engines.py `engine_for`): a statement prepared on a pooled
connection whose result type a schema change moved (a migration run while the process serves) fails once, which
drops the pool's connections, and runs again at the next try instead of failing on that connection for good."""

from __future__ import annotations

import os
from typing import Any

import psycopg
import pytest
from sqlalchemy import event, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncSession

from app.kernel import db, engines
from app.reports.policy import REPORT_PLANS, load_submitter
from app.reports.service import submit_report
from tests import factories
from tests.reports.support import finding, report_body
from tests.sql import scalar

PROBE = text("SELECT v FROM prepared_probe WHERE id = :id")


async def _probe(times: int) -> object:
    async with db.read_session(replica=False) as session:  # one connection: prepared from its 5th use
        for _ in range(times):
            value = (await session.execute(PROBE, {"id": 1})).scalar_one()
    return value


async def test_a_result_type_changed_under_a_prepared_statement_fails_once_then_runs() -> None:
    # an empty pool: the probes below then all run on the one connection the first of them opens (with connections
    # left idle by earlier tests, the failing probe could check out one that never prepared the statement)
    await db.dispose_engines()
    url = os.environ["DATABASE_URL"].replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url, autocommit=True) as other:  # the schema change comes from another process
        other.execute("CREATE TABLE prepared_probe (id bigint PRIMARY KEY, v integer)")
        try:
            other.execute("INSERT INTO prepared_probe VALUES (1, 7)")
            assert await _probe(engines.PREPARE_AFTER + 1) == 7
            # still planned for its parameters each time: no generic plan for a skewed pattern key
            assert await scalar("SHOW plan_cache_mode") == "force_custom_plan"
            other.execute("ALTER TABLE prepared_probe ALTER COLUMN v TYPE text")
            with pytest.raises(sa_exc.DBAPIError, match="cached plan must not change result type") as failed:
                await _probe(1)
            assert failed.value.connection_invalidated  # a public read that fails so runs once more (read_session)
            assert await _probe(engines.PREPARE_AFTER + 1) == "7"
        finally:
            await db.dispose_engines()
            other.execute("DROP TABLE prepared_probe")


async def test_a_report_transaction_plans_generically_and_the_next_transaction_does_not() -> None:
    """The report transaction's first statement lets the rest of it use generic plans (its statements are keyed by
    ids, app.reports.policy `REPORT_PLANS`); SET LOCAL ends with it, so the next transaction on the same connection
    (an atlas read keyed by a pattern key, say) is planned for its parameters again."""
    account = await factories.create_account(state="active")
    repo = await factories.create_repository("acme", "plans")
    async with db.engine().connect() as connection:
        async with connection.begin():
            actor, found = await load_submitter(
                AsyncSession(bind=connection), account.id, "GitHub.com", "Acme", "plans"
            )
            assert (actor.id, found and found.id) == (account.id, repo.id)
            assert (await connection.execute(text("SHOW plan_cache_mode"))).scalar() == REPORT_PLANS == "auto"
        async with connection.begin():
            assert (await connection.execute(text("SHOW plan_cache_mode"))).scalar() == "force_custom_plan"

    # and through the service: the connection the report used is back to custom plans once it committed
    used: list[Any] = []

    def remember(conn: Any, *_: Any) -> None:
        used.append(conn.connection.driver_connection)

    event.listen(db.engine().sync_engine, "after_cursor_execute", remember)
    try:
        await submit_report(account, repo.host, repo.owner, repo.name, report_body([finding()]))
    finally:
        event.remove(db.engine().sync_engine, "after_cursor_execute", remember)
    [connection_used] = set(used)  # one transaction, one connection
    cursor = await connection_used.execute("SHOW plan_cache_mode")
    assert await cursor.fetchone() == ("force_custom_plan",)
    await connection_used.rollback()


async def test_public_reads_plan_as_postgres_chooses_and_transactions_for_their_parameters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A public read (`db.reader()`) runs on the autocommit pool, whose prepared statements may use a generic plan
    (a finding page's statement planned once a connection, not at every request: docs/scaling.md "Two pools");
    a transaction, on the other pool, is still planned for its parameters."""
    monkeypatch.delenv("DATABASE_REPLICA_URL")  # the suite names the primary as its replica too
    async with db.reader() as read:
        [(mode,)] = await read.rows(text("SHOW plan_cache_mode"))
    assert mode == "auto"
    async with db.transaction() as session:
        assert (await session.execute(text("SHOW plan_cache_mode"))).scalar() == "force_custom_plan"
