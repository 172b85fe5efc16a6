"""The demo seed (docs/domain.md §10): accounts, listed repositories, 20 patterns / 95 instances, windows with content,
rollups drained, and idempotent re-runs; beside a worker draining the keys it marks (a deadlock lost to the drain
is retried), and finished by the next `--if-empty` run after it was killed half way."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import signal
import time
from collections import Counter

import psycopg
import pytest
from sqlalchemy import func, select, text

from app.accounts.models import Account
from app.accounts.passwords import verify_password
from app.kernel import db
from app.registry.models import Repository
from app.reports.finding_memory import pattern_key
from app.reports.models import Scan
from app.seed import DEMO_PASSWORD, seed_demo
from app.seed_data import DEMO_ONE_OFFS, DEMO_PATTERNS, DEMO_REPOSITORIES
from tests import factories
from tests.harness import ARTIFACTS, spawn, stop, tarakan


def test_pattern_table_matches_domain_section_10() -> None:
    statuses = Counter(s for _, _, row in DEMO_PATTERNS for s in row)
    assert len(DEMO_PATTERNS) == 20
    assert sum(statuses.values()) == 95
    assert statuses == {"open": 74, "verified": 12, "fixed": 8, "disputed": 1}
    assert {len(row) for _, _, row in DEMO_PATTERNS} == {3, 4, 5, 6, 7}


async def _scalar(sql: str, **params: object) -> object:
    async with db.read_session(replica=False) as session:
        return (await session.execute(text(sql), params)).scalar_one()


async def test_seed_builds_the_demo_registry_and_is_idempotent() -> None:
    summary = await seed_demo(if_empty=True)
    assert summary["skipped"] is False
    assert summary["reports_submitted"] == 95 + len(DEMO_ONE_OFFS)
    assert summary["reports_skipped"] == 0

    async with db.read_session(replica=False) as session:
        moderator = (await session.execute(select(Account).where(Account.handle == "mod"))).scalar_one()
        assert (moderator.email, moderator.platform_role, moderator.trust_tier, moderator.state) == (
            "mod@example.com",
            "moderator",
            "reviewer",
            "active",
        )
        assert moderator.password_hash is not None
        assert verify_password(moderator.password_hash, DEMO_PASSWORD)[0]
        assert (await session.execute(select(func.count()).select_from(Account))).scalar_one() == 3
        repos = (await session.execute(select(Repository).order_by(Repository.id))).scalars().all()
        assert len(repos) == len(DEMO_REPOSITORIES)
        assert all(r.listing_status == "listed" and r.description and r.primary_language for r in repos)
        assert all(r.stars_count > 0 for r in repos)
        # metrics were recalculated: every repository with an open or verified canonical says so
        assert sum(r.scan_count for r in repos) == 95 + len(DEMO_ONE_OFFS)
        assert all(r.status in ("findings", "reviewed") for r in repos if r.scan_count)
        session.expunge_all()  # keep the rows readable after the session's closing rollback

    # statuses written directly, exactly the §10 tallies for the pattern instances
    tallies = dict(
        await _session_rows(
            "SELECT status, count(*) FROM canonical_findings WHERE pattern_key = ANY(:keys) GROUP BY status",
            keys=[pattern_key(t) for t, _, _ in DEMO_PATTERNS],
        )
    )
    assert tallies == {"open": 74, "verified": 12, "fixed": 8, "disputed": 1}
    # the change feed announced the final statuses too (they were written with seeded timestamps)
    async with db.read_session(replica=False) as session:
        announced: dict[object, object] = dict(
            (
                await session.execute(
                    text(
                        "SELECT DISTINCT ON (canonical) canonical, status FROM changes "
                        "WHERE kind = 'finding.status' ORDER BY canonical, seq DESC"
                    )
                )
            ).all()
        )
        stored: dict[object, object] = dict(
            (await session.execute(text("SELECT public_id, status FROM canonical_findings"))).all()
        )
    assert announced == stored
    # verified/fixed carry verified_at, the others do not
    assert (
        await _scalar(
            "SELECT count(*) FROM canonical_findings WHERE (status IN ('verified','fixed')) <> (verified_at IS NOT NULL)"
        )
        == 0
    )

    # round-robin from sha256(title) mod len(repos), commit sha as §10, one report per instance
    title, _, statuses = DEMO_PATTERNS[0]
    offset = int(hashlib.sha256(title.encode()).hexdigest(), 16) % len(repos)
    expected_repo = repos[offset]
    sha = hashlib.sha256(f"seed-epi-v2-{expected_repo.id}-0-{title}".encode()).hexdigest()[:40]
    async with db.read_session(replica=False) as session:
        scan = (await session.execute(select(Scan).where(Scan.commit_sha == sha))).scalar_one()
        assert scan.repository_id == expected_repo.id
        assert (scan.model, scan.prompt_version, scan.visibility) == ("seed-agent", "epidemic-demo/v2", "public")
        assert scan.run_id is not None and scan.run_id.startswith("epi-seed-v2-")
    assert await _scalar(
        "SELECT count(DISTINCT repository_id) FROM canonical_findings WHERE pattern_key = :k", k=pattern_key(title)
    ) == len(statuses)

    # timestamps spread over 0-400 days, and every window has an infestation (>= 2 repositories)
    assert await _scalar("SELECT count(*) FROM canonical_findings WHERE updated_at < now() - interval '401 days'") == 0
    assert await _scalar("SELECT count(*) FROM canonical_findings WHERE inserted_at > updated_at") == 0
    for days in (7, 30, 90, 365):
        spread = await _scalar(
            "SELECT max(n) FROM (SELECT count(DISTINCT repository_id) AS n FROM canonical_findings "
            "WHERE pattern_key IS NOT NULL AND updated_at >= now() - make_interval(days => :d) "
            "GROUP BY pattern_key) t",
            d=days,
        )
        assert isinstance(spread, int) and spread >= 2, days
    beyond_a_year = await _scalar(
        "SELECT count(*) FROM canonical_findings WHERE updated_at < now() - interval '365 days'"
    )
    assert isinstance(beyond_a_year, int) and beyond_a_year > 0

    # rollups drained synchronously: the 20 patterns are projected, nothing left pending
    # (a pattern seen once still has a row; the one-offs are single-repository patterns)
    assert await _scalar("SELECT count(*) FROM infestation_patterns WHERE repo_count >= 2") == 20
    assert await _scalar("SELECT count(*) FROM infestation_patterns WHERE repo_count = 1") == len(DEMO_ONE_OFFS)
    assert await _scalar("SELECT count(*) FROM infestation_dirty_keys") == 0
    assert await _scalar("SELECT sum(instance_count) FROM infestation_patterns WHERE repo_count >= 2") == 95
    # the gate: shadow-compare finds no mismatch on the demo seed, and every cutover gate but the
    # nightly reconcile (never run here) passes
    from app.infestations.cutover import cutover_check
    from app.infestations.shadow import shadow_compare_all

    assert await shadow_compare_all() == []
    failed = [gate for gate, passed, _ in await cutover_check() if not passed]
    assert len(failed) <= 1 and all("reconcile" in gate for gate in failed), failed

    # a second run adds nothing
    again = await seed_demo(if_empty=False)
    assert again["reports_submitted"] == 0
    assert again["reports_skipped"] == 95 + len(DEMO_ONE_OFFS)
    assert await _scalar("SELECT count(*) FROM scans") == 95 + len(DEMO_ONE_OFFS)
    assert await _scalar("SELECT count(*) FROM accounts") == 3


async def _session_rows(sql: str, **params: object) -> list[tuple[str, int]]:
    async with db.read_session(replica=False) as session:
        return [(str(a), int(b)) for a, b in (await session.execute(text(sql), params)).all()]


async def test_if_empty_skips_when_any_repository_exists() -> None:
    await factories.create_repository("someone", "something")
    summary = await seed_demo(if_empty=True)
    assert summary["skipped"] is True
    assert await _scalar("SELECT count(*) FROM accounts") == 0
    assert await _scalar("SELECT count(*) FROM repositories") == 1


DEMO_REPORTS = 95 + len(DEMO_ONE_OFFS)


async def _assert_the_whole_demo() -> None:
    """Every report stored and dated, the §10 tallies, and the atlas projected from them."""
    assert await _scalar("SELECT count(*) FROM scans") == DEMO_REPORTS
    tallies = dict(
        await _session_rows(
            "SELECT status, count(*) FROM canonical_findings WHERE pattern_key = ANY(:keys) GROUP BY status",
            keys=[pattern_key(t) for t, _, _ in DEMO_PATTERNS],
        )
    )
    assert tallies == {"open": 74, "verified": 12, "fixed": 8, "disputed": 1}
    # dated: every report is as old as its canonical, none left at the time it was submitted
    assert await _scalar("SELECT count(*) FROM scans WHERE inserted_at > now() - interval '1 minute'") == 0
    assert await _scalar("SELECT count(*) FROM infestation_patterns WHERE repo_count >= 2") == 20
    assert await _scalar("SELECT sum(instance_count) FROM infestation_patterns WHERE repo_count >= 2") == 95


def _plain_url() -> str:
    return os.environ["DATABASE_URL"].replace("postgresql+psycopg://", "postgresql://")


async def _wait_for(sql: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not await _scalar(sql):
        assert time.monotonic() < deadline, f"not within {timeout} s: {sql}"
        await asyncio.sleep(0.005)


async def test_a_deadlock_lost_to_the_drain_is_retried_and_the_demo_is_whole(caplog: pytest.LogCaptureFixture) -> None:
    """The race of a first `./run`, made certain: once the reports are in, a second connection settles dirty rows
    as a drain batch does (its DELETE takes them in its join's order: here the last key first), the seed's
    transaction marks the keys in sorted order and waits on that row, the drain reaches for the first key, which
    the seed holds: Postgres aborts the seed's transaction (it waited first). Before the seed retried, the command
    failed there with the reports stored and none of their statuses or dates."""
    keys = sorted(pattern_key(t) for t, _, _ in DEMO_PATTERNS)
    caplog.set_level(logging.WARNING, logger="app.seed")
    seeding = asyncio.create_task(seed_demo(if_empty=True))
    async with await psycopg.AsyncConnection.connect(_plain_url()) as drain:
        await _wait_for(f"SELECT count(*) = {DEMO_REPORTS} FROM scans")
        await drain.execute("DELETE FROM infestation_dirty_keys WHERE pattern_key = %s", (keys[-1],))
        await _wait_for(
            "SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND query LIKE '%INSERT INTO infestation_dirty_keys%'"
        )
        await drain.execute("DELETE FROM infestation_dirty_keys WHERE pattern_key = %s", (keys[0],))
        await drain.commit()
    summary = await asyncio.wait_for(seeding, 120)
    assert any("lost a deadlock" in r.getMessage() for r in caplog.records), "the race did not happen"
    assert summary["reports_submitted"] == summary["reports_dated"] == DEMO_REPORTS
    assert await _scalar("SELECT count(*) FROM infestation_dirty_keys") == 0
    await _assert_the_whole_demo()


async def test_the_seed_beside_a_running_worker_loads_the_whole_demo() -> None:
    """`./run`'s first start: the worker drains every key the seed's reports mark (rung at each commit, no hot-key
    wait) while the seed goes on, then the seed dates them all and drains what is left."""
    worker = spawn("worker", env={"INFESTATIONS_HOT_KEY_INTERVAL": "0"}, log=ARTIFACTS / "seed-worker.log")
    try:
        seeded = await tarakan("seed", "--demo", "--if-empty")
        assert seeded.code == 0, seeded
        assert f"{DEMO_REPORTS} reports submitted" in seeded.out and f"{DEMO_REPORTS} given their status" in seeded.out
        await _wait_for("SELECT count(*) = 0 FROM infestation_dirty_keys")  # a key the worker still held
        assert worker.poll() is None, "the worker exited"
    finally:
        await asyncio.to_thread(stop, worker, signal.SIGTERM, 15)
    await _assert_the_whole_demo()
    assert "refreshed" in (ARTIFACTS / "seed-worker.log").read_text(), "the worker drained nothing"


async def test_a_seed_killed_half_way_is_finished_by_the_next_run() -> None:
    """A seed killed (SIGKILL) with part of its reports stored: the next `seed --demo --if-empty` (the next
    `./run`) sees an unfinished demo, not a registry in use, and finishes it, dating the reports stored before."""
    first = spawn("seed", "--demo", "--if-empty", quiet=True)
    try:
        await _wait_for("SELECT count(*) >= 30 FROM scans")
        first.send_signal(signal.SIGKILL)
    finally:
        await asyncio.to_thread(first.wait, 15)
    assert first.returncode == -signal.SIGKILL
    stored = await _scalar("SELECT count(*) FROM scans")
    assert isinstance(stored, int) and 30 <= stored < DEMO_REPORTS, stored
    resumed = await tarakan("seed", "--demo", "--if-empty")
    assert resumed.code == 0, resumed
    assert f"({stored} already there; {DEMO_REPORTS} given their status and dates)" in resumed.out, resumed.out
    await _assert_the_whole_demo()
    # finished: the next run leaves it alone
    again = await tarakan("seed", "--demo", "--if-empty")
    assert again.code == 0 and "seed: skipped" in again.out, again
