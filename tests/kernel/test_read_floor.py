"""The per-request floor keeps its guarantees (issue 26, docs/reliability.md): without a pre-ping on every checkout,
a pooled connection the server closed (Postgres restarted, or its backend was terminated) is replaced at checkout,
and one that died silently costs a public GET nothing (it runs once more) and a write one 503, whatever the pool
held; and the statement timeout applies to every
public read, on fresh and reused pooled connections, with the cap as a startup option and with it set per
transaction (DB_TRANSACTION_POOLING), where search's nested timeout still holds inside it."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator

import httpx
import psycopg
import pytest
from prometheus_client import REGISTRY
from psycopg.pq import TransactionStatus
from sqlalchemy import text

from app.kernel import db, engines, outages
from app.registry import queries as registry_queries
from tests import factories

FAILURES = "tarakan_dependency_failures_total"
PAGE = "/repos/github.com/acme/widget.json"
SUBSTRING_MS = registry_queries.SUBSTRING_TIMEOUT_MS


def _failures() -> float:
    return REGISTRY.get_sample_value(FAILURES, {"dependency": "database", "source": "request"}) or 0.0


def _plain(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


_OTHERS = (
    "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    " AND backend_type = 'client backend'"
)


def terminate_our_backends() -> int:
    """Every other client connection to the test database ends (what a Postgres restart does to a pool), and is
    gone when this returns."""
    with psycopg.connect(_plain(os.environ["DATABASE_URL"]), autocommit=True) as conn:
        row = conn.execute(f"SELECT count(pg_terminate_backend(pid)) {_OTHERS}").fetchone()
        deadline = time.monotonic() + 5
        while (left := conn.execute(f"SELECT count(*) {_OTHERS}").fetchone()) and left[0]:
            assert time.monotonic() < deadline, "the terminated backends did not exit"
            time.sleep(0.01)
    assert row is not None
    return int(row[0])


@pytest.fixture
def silent_deaths(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dead connections the checkout cannot see (a host gone without closing its sockets): only their first
    statement finds out."""
    monkeypatch.setattr(engines, "_closed_by_server", lambda connection: False)


async def fill_pool(connections: int) -> None:
    """`connections` distinct connections opened and given back to this loop's pool."""
    async with db.read_session(replica=False) as first:
        await first.execute(text("SELECT 1"))
        if connections > 1:
            await fill_pool(connections - 1)


@pytest.fixture
async def fresh_pools() -> AsyncIterator[None]:
    await db.dispose_engines()
    outages.reset_log_intervals()
    yield
    await db.dispose_engines()


PUBLIC_READS = ("/infestations.json", "/infestations", "/repos/github.com/acme/widget.json", "/index.json")


async def _writes(n: int) -> list[str]:
    outcomes = []
    for _ in range(n):
        try:
            async with db.transaction() as session:
                await session.execute(text("SELECT 1"))
            outcomes.append("ok")
        except Exception as exc:
            assert db.dead_connection(exc) and outages.dependency_of(exc) == outages.DATABASE
            outcomes.append("dead")
    return outcomes


async def _public_reads_after_the_pool_died(client: httpx.AsyncClient) -> float:
    """Every public read answers 200 after the server closed every pooled connection; returns how many checkout
    failures were counted while they ran."""
    await factories.create_repository("acme", "widget")
    await fill_pool(4)
    assert terminate_our_backends() >= 4
    before = _failures()
    for path in PUBLIC_READS:
        response = await client.get(path)
        assert response.status_code == 200, (path, response.text[:200])
    return _failures() - before


async def test_connections_the_server_closed_are_replaced_at_checkout(
    client: httpx.AsyncClient, fresh_pools: None
) -> None:
    assert await _public_reads_after_the_pool_died(client) == 0  # no statement ever ran on a dead connection
    await fill_pool(4)
    assert terminate_our_backends() >= 4
    assert await _writes(4) == ["ok"] * 4


async def test_silently_dead_connections_cost_a_public_read_nothing(
    client: httpx.AsyncClient, fresh_pools: None, silent_deaths: None
) -> None:
    # the first GET met a dead connection and answered anyway; the rest found a renewed pool. The one who meets
    # it is the page's read (counted once, run again) or, since page_route reads the rollup flag before the page's
    # read, the runtime-flag read, which keeps its last known values (app/kernel/flags.py) and counts nothing
    assert await _public_reads_after_the_pool_died(client) in (0, 1)


async def test_silently_dead_connections_cost_a_write_one_failure(fresh_pools: None, silent_deaths: None) -> None:
    await fill_pool(4)
    assert terminate_our_backends() >= 4
    # one failure, not one per pooled connection: the first dead one invalidates every connection pooled before it
    assert await _writes(4) == ["dead", "ok", "ok", "ok"]


@pytest.fixture(params=[False, True], ids=["startup-option", "per-transaction"])
async def capped(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[bool]:
    """Statements capped at 0.2 s as `tarakan serve` caps them, in one of the two ways (DB_TRANSACTION_POOLING)."""
    await db.dispose_engines()
    monkeypatch.setenv("DB_STATEMENT_TIMEOUT", "0.2")
    monkeypatch.setenv("DB_TRANSACTION_POOLING", "1" if request.param else "0")
    monkeypatch.setattr(engines, "_statement_timeout", 0.0)
    db.limit_statements()
    yield request.param
    await db.dispose_engines()


async def _read_timeout(*, replica: bool) -> str:
    async with db.read_session(replica=replica) as session:
        return str((await session.execute(text("SHOW statement_timeout"))).scalar_one())


async def test_every_read_is_capped_on_fresh_and_reused_connections(capped: bool) -> None:
    await fill_pool(3)  # reads below reuse these connections
    for replica in (True, False, True):
        assert await _read_timeout(replica=replica) == "200ms"
    # a read on the same connection right after a capped one, concurrently with others: still capped
    assert set(await asyncio.gather(*(_read_timeout(replica=True) for _ in range(5)))) == {"200ms"}
    async with db.transaction() as session:
        assert (await session.execute(text("SHOW statement_timeout"))).scalar_one() == "200ms"
    if capped:  # set per transaction: a connection between two transactions carries no cap of its own
        async with db.engine().connect() as conn:
            await conn.commit()
            autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
            assert (await autocommit.execute(text("SHOW statement_timeout"))).scalar_one() == "0"


async def test_a_public_page_waiting_on_a_lock_answers_503_at_the_cap_twice(
    client: httpx.AsyncClient, capped: bool
) -> None:
    await factories.create_repository("acme", "widget")
    await fill_pool(2)
    with psycopg.connect(_plain(os.environ["DATABASE_URL"])) as locker:
        locker.execute("LOCK TABLE repositories IN ACCESS EXCLUSIVE MODE")
        for _ in range(2):  # the second on a connection the first gave back
            started = time.monotonic()
            response = await client.get(PAGE)
            assert response.status_code == 503, response.text[:200]
            assert time.monotonic() - started < 2
        locker.rollback()
    assert (await client.get(PAGE)).status_code == 200


async def test_search_keeps_its_nested_timeout_and_the_next_read_its_cap(capped: bool) -> None:
    await factories.create_repository("acme", "widget")
    await fill_pool(1)
    async with db.read_session(transaction=True) as session, session.begin_nested():
        # what search's substring pass does (app.registry.queries._search)
        await session.execute(registry_queries._SUBSTRING_TIMEOUT, {"timeout": str(SUBSTRING_MS)})
        inner = (await session.execute(text("SHOW statement_timeout"))).scalar_one()
    assert inner == f"{SUBSTRING_MS}ms"
    assert await _read_timeout(replica=True) == "200ms"  # the same pooled connection: the read's cap is back
    found = await registry_queries.search_repositories("idge")  # the substring pass finds it (no name prefix)
    assert [(r["owner"], r["name"]) for r in found] == [("acme", "widget")]


async def _status_after_a_statement(*, transaction: bool) -> TransactionStatus:
    async with db.read_session(transaction=transaction) as session:
        await session.execute(text("SELECT 1"))
        raw = (await (await session.connection()).get_raw_connection()).driver_connection
        assert isinstance(raw, psycopg.AsyncConnection)
        return raw.info.transaction_status


async def test_a_read_is_one_round_trip_per_statement_where_the_pooling_allows(capped: bool) -> None:
    # in autocommit psycopg sends no BEGIN before the statement (and nothing is left to roll back after it)
    expected = TransactionStatus.INTRANS if capped else TransactionStatus.IDLE
    assert await _status_after_a_statement(transaction=False) == expected
    assert await _status_after_a_statement(transaction=True) == TransactionStatus.INTRANS
    async with db.transaction() as session:  # writes keep their transaction
        await session.execute(text("SELECT 1"))
        raw = (await (await session.connection()).get_raw_connection()).driver_connection
        assert isinstance(raw, psycopg.AsyncConnection)
        assert raw.info.transaction_status == TransactionStatus.INTRANS
