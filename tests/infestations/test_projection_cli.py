"""`tarakan jobs drain` and `tarakan infestations ...` as an operator runs them: real processes, real database."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from app.accounts.models import Account
from app.infestations import dirty_queue, maintenance
from app.kernel import db
from app.record import outbox
from app.reports.finding_memory import pattern_key
from tests import factories as f
from tests.harness import tarakan

TITLE = "Server-side request forgery in webhook"
KEY = pattern_key(TITLE)


async def rows(sql: str, **params: Any) -> list[dict[str, Any]]:
    async with db.read_session(replica=False) as session:
        return [dict(r) for r in (await session.execute(text(sql), params)).mappings().all()]


async def pattern_in_repos(reporter: Account, title: str, repos: int) -> None:
    for _ in range(repos):
        await f.create_instance(await f.create_repository(), reporter, title)


async def test_jobs_drain_runs_everything_pending_and_exits() -> None:
    reporter = await f.create_account()
    await pattern_in_repos(reporter, TITLE, 3)
    async with db.transaction() as session:
        await outbox.mark_dirty(session, [KEY, pattern_key("nothing here")], "assimilate")

    run = await tarakan("jobs", "drain")

    assert run.code == 0, run.err
    rollups, trust = run.out.strip().splitlines()
    assert rollups == "drained: 2 keys refreshed, 0 left waiting"
    assert trust.startswith("earned trust: ")  # its half of the drain (app/trust/refresh.py)
    assert await rows("SELECT pattern_key, repo_count FROM infestation_patterns") == [
        {"pattern_key": KEY, "repo_count": 3}
    ]
    assert await rows("SELECT * FROM infestation_dirty_keys") == []


async def test_refresh_one_key_and_reject_a_malformed_key() -> None:
    reporter = await f.create_account()
    await pattern_in_repos(reporter, TITLE, 2)

    run = await tarakan("infestations", "refresh", KEY)
    assert run.code == 0, run.err
    assert run.out.strip() == f"refreshed {KEY}: 2 instances"

    bad = await tarakan("infestations", "refresh", KEY.upper())
    assert bad.code == 1
    assert bad.err.strip() == "tarakan: error: pattern_key: must be 64 lowercase hexadecimal characters"
    assert await rows("SELECT count(*) AS n FROM infestation_patterns") == [{"n": 1}]


async def test_backfill_reconcile_and_recompute_windows_report_progress() -> None:
    reporter = await f.create_account()
    for n in range(3):
        await pattern_in_repos(reporter, f"{TITLE} variant {n}", 2)

    backfill = await tarakan("infestations", "backfill")
    assert backfill.code == 0, backfill.err
    first, last = backfill.out.strip().splitlines()
    assert first.startswith("backfill: range 1/1 [-, -): 3 keys, 6 instances (")
    assert last == "backfill: done, 3 keys refreshed"
    assert await rows("SELECT count(*) AS n FROM infestation_patterns") == [{"n": 3}]

    windows = await tarakan("infestations", "recompute-windows")
    assert windows.code == 0, windows.err
    assert windows.out.strip().splitlines() == [
        "recompute-windows: range 1/1 [-, -), 3 patterns",
        "recompute-windows: done, 3 patterns",
    ]

    ranged = await tarakan("infestations", "backfill", "--ranges", "4", "--concurrency", "2")
    assert ranged.code == 0, ranged.err
    assert sum(line.startswith("backfill: range ") for line in ranged.out.splitlines()) == 4
    assert ranged.out.strip().splitlines()[-1] == "backfill: done, 3 keys refreshed"

    reconcile = await tarakan("infestations", "reconcile")
    assert reconcile.code == 0, reconcile.err
    lines = reconcile.out.strip().splitlines()
    assert lines[0].startswith("reconcile source: 3 keys marked, 3 refreshed")
    assert lines[-1] == "reconcile: done, source_keys=3, refreshed=3, orphans_checked=3, orphans_removed=0"
    assert len(await rows("SELECT finished_at FROM job_runs WHERE name = 'reconcile'")) == 1


async def test_shadow_compare_and_cutover_check_exit_nonzero_until_the_rollups_agree() -> None:
    reporter = await f.create_account()
    await pattern_in_repos(reporter, TITLE, 2)
    async with db.transaction() as session:
        await outbox.mark_dirty(session, [KEY], "assimilate")

    # nothing projected yet: the legacy read sees a pattern the rollup does not
    stale = await tarakan("infestations", "shadow-compare")
    assert stale.code == 1
    assert "mismatch: days=30 min_repos=2 status=all: keys only in legacy" in stale.out
    gates = await tarakan("infestations", "cutover-check")
    assert gates.code == 1
    assert "FAIL backfill coverage" in gates.out and "FAIL recent reconcile" in gates.out

    await dirty_queue.drain_all()
    await maintenance.reconcile()

    clean = await tarakan("infestations", "shadow-compare")
    assert clean.code == 0, clean.out
    assert clean.out.strip() == "shadow-compare: 0 mismatches"
    passed = await tarakan("infestations", "cutover-check")
    assert passed.code == 0, passed.out
    assert passed.out.strip().splitlines()[-1] == "cutover-check: all gates pass"
