"""registry_stats(): what the home page and the sitemap threshold read, and its single-flight cache."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import text

from app.kernel import db
from app.kernel.cache import SingleFlightCache
from app.kernel.config import ConfigError
from app.registry import stats
from app.registry.stats import invalidate_registry_stats, registry_stats, reset_registry_stats_cache
from tests import factories


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    reset_registry_stats_cache()
    yield
    reset_registry_stats_cache()


class CountingQuery:
    """Wraps the real query function: counts calls, and can hold them at a gate."""

    def __init__(self, real: Callable[[], Awaitable[dict[str, int]]]) -> None:
        self.real = real
        self.calls = 0
        self.gate: asyncio.Event | None = None
        self.started = asyncio.Event()

    async def __call__(self) -> dict[str, int]:
        self.calls += 1
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        else:
            await asyncio.sleep(0.02)  # long enough for the other callers to arrive mid-refresh
        return await self.real()


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> CountingQuery:
    wrapper = CountingQuery(stats.query_registry_stats)
    monkeypatch.setattr(stats, "query_registry_stats", wrapper)
    return wrapper


async def sql(statement: str, **params: Any) -> None:
    async with db.transaction() as session:
        await session.execute(text(statement), params)


async def test_counts_listed_repositories_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REGISTRY_STATS_TTL", "0")
    a = await factories.create_repository()
    b = await factories.create_repository()
    await factories.create_repository()  # listed, unscanned
    hidden = await factories.create_repository(listing_status="quarantined")
    pending = await factories.create_repository(listing_status="pending")
    await sql(
        "UPDATE repositories SET status = 'findings', open_findings_count = 3, verified_findings_count = 1 "
        "WHERE id IN (:a, :b, :hidden, :pending)",
        a=a.id,
        b=b.id,
        hidden=hidden.id,
        pending=pending.id,
    )
    result = await registry_stats()
    assert {k: result[k] for k in ("repositories", "unscanned", "open_findings", "verified_findings")} == {
        "repositories": 3,
        "unscanned": 1,
        "open_findings": 6,
        "verified_findings": 2,
    }


async def test_contributors_are_distinct_visible_reporters_and_confirmers_on_listed_repos(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REGISTRY_STATS_TTL", "0")
    listed = await factories.create_repository()
    quarantined = await factories.create_repository(listing_status="quarantined")
    reporter, summary_reporter, restricted_reporter, hidden_reporter = [
        await factories.create_account() for _ in "1234"
    ]
    confirmer, restricted_confirmer = await factories.create_account(), await factories.create_account()
    public_scan = await factories.create_scan(listed, reporter)
    await factories.create_scan(listed, reporter)  # counted once
    await factories.create_scan(listed, summary_reporter, visibility="public_summary")
    restricted_scan = await factories.create_scan(listed, restricted_reporter, visibility="restricted")
    await factories.create_scan(quarantined, hidden_reporter)
    for scan_id, account_id in (
        (public_scan.id, confirmer.id),
        (public_scan.id, summary_reporter.id),  # already a contributor
        (restricted_scan.id, restricted_confirmer.id),
    ):
        await sql(
            "INSERT INTO scan_confirmations (scan_id, account_id, verdict, notes) VALUES (:s, :a, 'confirmed', 'ok')",
            s=scan_id,
            a=account_id,
        )
    assert (await registry_stats())["contributors"] == 3  # reporter, summary_reporter, confirmer


async def test_concurrent_callers_share_one_query(monkeypatch: pytest.MonkeyPatch, counting: CountingQuery) -> None:
    monkeypatch.setenv("REGISTRY_STATS_TTL", "30")
    await factories.create_repository()
    results = await asyncio.gather(*[registry_stats() for _ in range(25)])
    assert counting.calls == 1
    assert all(r["repositories"] == 1 for r in results)
    await factories.create_repository()
    assert (await registry_stats())["repositories"] == 1  # a hit: the cached value, no new query
    assert counting.calls == 1


async def test_single_flight_holds_without_a_cache(monkeypatch: pytest.MonkeyPatch, counting: CountingQuery) -> None:
    monkeypatch.setenv("REGISTRY_STATS_TTL", "0")
    results = await asyncio.gather(*[registry_stats() for _ in range(10)])
    assert counting.calls == 1  # nobody had a value: all waited for the one refresher
    assert {r["repositories"] for r in results} == {0}
    await registry_stats()
    assert counting.calls == 2  # TTL 0: the next call after the refresh queries again


async def test_invalidation_refreshes_and_others_get_the_current_value_meanwhile(
    monkeypatch: pytest.MonkeyPatch, counting: CountingQuery
) -> None:
    monkeypatch.setenv("REGISTRY_STATS_TTL", "60")
    assert (await registry_stats())["repositories"] == 0
    await factories.create_repository()
    invalidate_registry_stats()  # what the report and moderation services do after commit

    counting.gate = asyncio.Event()
    counting.started.clear()
    refresher = asyncio.create_task(registry_stats())
    await counting.started.wait()  # the refresh is running and held at the gate
    meanwhile = await asyncio.wait_for(registry_stats(), timeout=1)
    assert meanwhile["repositories"] == 0  # the value it had, at once, without a second query
    assert counting.calls == 2
    counting.gate.set()
    assert (await refresher)["repositories"] == 1
    assert (await registry_stats())["repositories"] == 1  # the fresh value is cached now
    assert counting.calls == 2


async def test_a_refresh_started_before_an_invalidation_is_not_cached_as_fresh() -> None:
    ttl = 60.0
    cache: SingleFlightCache[int] = SingleFlightCache(lambda: ttl)
    gate = asyncio.Event()
    source = {"value": 1}

    async def load() -> int:
        seen = source["value"]
        await gate.wait()
        return seen

    first = asyncio.create_task(cache.get("k", load))
    await asyncio.sleep(0)
    source["value"] = 2
    cache.invalidate()  # the change committed while the old refresh was reading
    gate.set()
    assert await first == 1
    assert await cache.get("k", load) == 2  # not served the pre-invalidation value as fresh


async def test_results_are_copies_and_bad_ttl_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REGISTRY_STATS_TTL", "30")
    first = await registry_stats()
    first["repositories"] = 999
    assert (await registry_stats())["repositories"] == 0
    monkeypatch.setenv("REGISTRY_STATS_TTL", "soon")
    with pytest.raises(ConfigError, match="REGISTRY_STATS_TTL"):
        await registry_stats()


async def test_an_aged_out_value_is_served_at_once_and_refreshed_behind(
    monkeypatch: pytest.MonkeyPatch, counting: CountingQuery
) -> None:
    monkeypatch.setenv("REGISTRY_STATS_TTL", "0.2")
    assert (await registry_stats())["repositories"] == 0
    await factories.create_repository()  # no invalidation: the value only ages out
    await asyncio.sleep(0.3)

    counting.gate = asyncio.Event()
    counting.started.clear()
    aged = await asyncio.wait_for(registry_stats(), timeout=1)  # a caller waiting for the held loader would time out
    assert aged["repositories"] == 0
    await counting.started.wait()  # the refresh runs behind the caller
    assert (await registry_stats())["repositories"] == 0  # meanwhile the previous value, and no second refresh
    assert counting.calls == 2
    counting.gate.set()
    for _ in range(200):
        if (await registry_stats())["repositories"] == 1:
            break
        await asyncio.sleep(0.01)
    assert (await registry_stats())["repositories"] == 1
    assert counting.calls == 2


async def test_a_failed_background_refresh_keeps_the_previous_value() -> None:
    cache: SingleFlightCache[int] = SingleFlightCache(lambda: 0.05)
    calls = 0

    async def load() -> int:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OSError("database away")
        return calls

    async def let_background_run() -> None:
        for _ in range(50):
            await asyncio.sleep(0)

    assert await cache.get("k", load) == 1
    await asyncio.sleep(0.1)
    assert await cache.get("k", load) == 1  # aged out: served, refreshed behind (and that refresh fails)
    await let_background_run()
    assert calls == 2
    await asyncio.sleep(0.1)
    assert await cache.get("k", load) == 1  # still the previous value; another refresh behind
    await let_background_run()
    assert await cache.get("k", load) == 3
