"""Cutover gates: each one fails for the reason docs/domain.md §13 names, and all pass on a healthy projection."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text

from app.infestations import dirty_queue, maintenance
from app.infestations.cutover import ROLLUP_INDEXES, cutover_check
from app.kernel import db
from app.kernel.sql import WINDOW_DAYS
from app.record import outbox
from app.reports.finding_memory import pattern_key
from tests.infestations.support import SQLI, XSS, build_registry

GATES = [
    "backfill coverage",
    "rollup indexes valid",
    "dirty backlog drained",
    "recent reconcile",
    "shadow-compare clean",
]


async def execute(sql: str, **params: object) -> None:
    async with db.transaction() as session:
        await session.execute(text(sql), params)


async def gates() -> dict[str, tuple[bool, str]]:
    result = await cutover_check()
    assert [name for name, _, _ in result] == GATES
    return {name: (ok, detail) for name, ok, detail in result}


async def test_an_empty_registry_passes_everything_but_the_reconcile_gate() -> None:
    before = await gates()
    assert {name: ok for name, (ok, _) in before.items()} == {
        "backfill coverage": True,
        "rollup indexes valid": True,
        "dirty backlog drained": True,
        "recent reconcile": False,
        "shadow-compare clean": True,
    }
    assert before["recent reconcile"][1] == "no finished reconcile run recorded"
    await maintenance.reconcile()
    assert all(ok for ok, _ in (await gates()).values())


async def test_coverage_and_shadow_fail_until_the_backfill_ran() -> None:
    await build_registry()
    await maintenance.reconcile()  # a reconcile run is recorded; then the rollups are wiped as if never built
    await execute("TRUNCATE infestation_patterns, infestation_pattern_repos, infestation_pattern_instances")
    before = await gates()
    assert before["backfill coverage"] == (False, "0/5 source keys refreshed within 26h (0.00%; need 99%)")
    assert before["shadow-compare clean"][0] is False
    assert before["recent reconcile"][0] is True

    assert await maintenance.backfill(progress=None) == 5
    after = await gates()
    assert after["backfill coverage"] == (True, "5/5 source keys refreshed within 26h (100.00%; need 99%)")
    assert all(ok for ok, _ in after.values()), after

    # a row refreshed long ago no longer counts as covered
    await execute(
        "UPDATE infestation_patterns SET refreshed_at = now() - interval '3 days' WHERE pattern_key = :k",
        k=pattern_key(SQLI),
    )
    assert (await gates())["backfill coverage"][0] is False


async def test_a_dirty_key_waiting_over_a_minute_fails_the_backlog_gate() -> None:
    await build_registry()
    await maintenance.backfill(progress=None)
    await maintenance.reconcile()
    async with db.transaction() as session:
        await outbox.mark_dirty(session, [pattern_key(SQLI), pattern_key(XSS)], "status")
    assert (await gates())["dirty backlog drained"][0] is True  # just dirtied: the workers have a minute
    await execute("UPDATE infestation_dirty_keys SET dirtied_at = now() - interval '5 minutes'")
    ok, detail = (await gates())["dirty backlog drained"]
    assert not ok and detail.startswith("2 claimable dirty keys waiting, oldest 30")
    # a key a worker holds, or one throttled as hot, is being handled
    await execute(
        "UPDATE infestation_dirty_keys SET claimed_by = 'w1', claimed_until = now() + interval '1 minute' "
        "WHERE pattern_key = :k",
        k=pattern_key(SQLI),
    )
    await execute(
        "UPDATE infestation_dirty_keys SET available_at = now() + interval '20 seconds' WHERE pattern_key = :k",
        k=pattern_key(XSS),
    )
    assert (await gates())["dirty backlog drained"][0] is True
    await execute("UPDATE infestation_dirty_keys SET claimed_by = NULL, claimed_until = NULL, available_at = now()")
    assert (await gates())["dirty backlog drained"][0] is False
    await dirty_queue.drain_all()
    assert (await gates())["dirty backlog drained"] == (True, "no claimable dirty key older than 60s")


async def test_a_reconcile_older_than_26_hours_fails() -> None:
    await maintenance.reconcile()
    await execute("UPDATE job_runs SET finished_at = now() - interval '27 hours' WHERE name = 'reconcile'")
    ok, detail = (await gates())["recent reconcile"]
    assert not ok and detail.endswith("(older than 26h)")
    await execute("UPDATE job_runs SET finished_at = NULL WHERE name = 'reconcile'")  # a run still going
    assert (await gates())["recent reconcile"] == (False, "no finished reconcile run recorded")


@pytest.fixture(params=["infestation_patterns_rank_90d_idx", "infestation_pattern_status_windows_rank_idx"])
async def invalid_rank_index(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """Mark one rank index invalid, as a failed CREATE INDEX CONCURRENTLY leaves it; restored afterwards."""
    name = str(request.param)
    flip = "UPDATE pg_index SET indisvalid = :valid WHERE indexrelid = CAST(:name AS regclass)"
    await execute(flip, valid=False, name=name)
    try:
        yield name
    finally:
        await execute(flip, valid=True, name=name)


async def test_an_invalid_rank_index_fails(invalid_rank_index: str) -> None:
    assert (await gates())["rollup indexes valid"] == (False, f"invalid {invalid_rank_index}")


def test_the_index_gate_checks_every_index_the_rollup_models_declare() -> None:
    """The list comes from the models: the status-filtered lists' rank index and the ledger's are in it."""
    assert "infestation_pattern_status_windows_rank_idx" in ROLLUP_INDEXES
    assert "infestation_pattern_instances_ledger_idx" in ROLLUP_INDEXES
    assert {f"infestation_patterns_rank_{w}d_idx" for w in WINDOW_DAYS} <= set(ROLLUP_INDEXES)
    assert "infestation_dirty_keys_available_idx" not in ROLLUP_INDEXES  # the queue is not read by a public read


async def test_a_dropped_rollup_index_fails() -> None:
    await execute("ALTER INDEX infestation_pattern_repos_repo_idx RENAME TO gone_for_the_test_idx")
    try:
        assert (await gates())["rollup indexes valid"] == (False, "missing infestation_pattern_repos_repo_idx")
    finally:
        await execute("ALTER INDEX gone_for_the_test_idx RENAME TO infestation_pattern_repos_repo_idx")
