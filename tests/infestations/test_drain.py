"""The dirty-keys protocol (docs/domain.md §12, decision 1): claim with SKIP LOCKED, refresh, delete only the refreshed version."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import text

from app.accounts.models import Account
from app.devservices import free_port
from app.infestations import dirty_queue, projection
from app.kernel import db
from app.record import outbox
from app.reports.finding_memory import pattern_key
from tests import factories as f
from tests.sql import execute, rows

TITLE = "Hard-coded credentials in settings"
KEY = pattern_key(TITLE)


async def dirty(key: str = KEY) -> dict[str, Any] | None:
    found = await rows(
        "SELECT *, EXTRACT(EPOCH FROM available_at - now()) AS available_in FROM infestation_dirty_keys"
        " WHERE pattern_key = :k",
        k=key,
    )
    return found[0] if found else None


async def repo_count(key: str = KEY) -> int | None:
    found = await rows("SELECT repo_count FROM infestation_patterns WHERE pattern_key = :k", k=key)
    return int(found[0]["repo_count"]) if found else None


async def mark(*keys: str, reason: str = "assimilate") -> None:
    async with db.transaction() as session:
        await outbox.mark_dirty(session, keys, reason)


@pytest.fixture
async def reporter() -> Account:
    return await f.create_account()


async def test_drain_refreshes_dirty_keys_and_deletes_them(reporter: Account) -> None:
    repo_a, repo_b = await f.create_repository(), await f.create_repository()
    await f.create_instance(repo_a, reporter, TITLE)
    await f.create_instance(repo_b, reporter, TITLE)
    empty_key = pattern_key("A title nobody reported")
    await mark(KEY, empty_key)

    result = await dirty_queue.drain()

    assert (result.refreshed, result.failed, result.released, result.remaining_claimable) == (2, 0, 0, 0)
    assert result.refreshed_keys == sorted([KEY, empty_key])
    assert await repo_count() == 2
    assert await rows("SELECT * FROM infestation_dirty_keys") == []
    assert REGISTRY.get_sample_value("tarakan_infestations_dirty_backlog") == 0


async def test_a_key_redirtied_while_its_refresh_runs_is_refreshed_again(reporter: Account) -> None:
    repo_a, repo_b = await f.create_repository(), await f.create_repository()
    await f.create_instance(repo_a, reporter, TITLE)
    await mark(KEY)

    # Hold the key's refresh lock from another connection so the drain is caught mid-refresh.
    async with db.engine().connect() as blocker:
        await blocker.execute(text("SELECT pg_advisory_lock(hashtextextended(:k, 0))"), {"k": KEY})
        await blocker.commit()
        draining = asyncio.create_task(dirty_queue.drain(throttle=False, worker_id="worker-1"))
        deadline = time.monotonic() + 10
        while (row := await dirty()) is None or row["claimed_by"] != "worker-1":
            assert time.monotonic() < deadline, "the drain never claimed the key"
            await asyncio.sleep(0.02)
        # a second report lands while the key is being refreshed
        await f.create_instance(repo_b, reporter, TITLE)
        await mark(KEY)
        await blocker.execute(text("SELECT pg_advisory_unlock(hashtextextended(:k, 0))"), {"k": KEY})
        await blocker.commit()
        result = await asyncio.wait_for(draining, 10)

    assert (result.refreshed, result.released) == (1, 1)
    row = await dirty()
    assert row is not None, "the re-dirtied key was deleted: its change could be lost"
    assert (row["version"], row["claimed_by"], row["attempts"]) == (2, None, 0)
    assert row["available_in"] <= 0  # not throttled: claimable again at once

    again = await dirty_queue.drain(throttle=False)
    assert again.refreshed_keys == [KEY]
    assert await dirty() is None
    assert await repo_count() == 2


async def test_a_change_committed_after_the_refresh_read_is_not_lost_and_hot_keys_are_throttled(
    reporter: Account,
) -> None:
    repo_a, repo_b = await f.create_repository(), await f.create_repository()
    await f.create_instance(repo_a, reporter, TITLE)
    await mark(KEY)

    [claim] = await dirty_queue.claim_dirty_keys("worker-1", 200)
    await projection.refresh_pattern(claim.pattern_key)
    # this report commits after the refresh read the source: the projection is now stale
    await f.create_instance(repo_b, reporter, TITLE)
    await mark(KEY)
    assert await dirty_queue.settle_refreshed(claim, "worker-1", elapsed=0.5, throttle=True) is False
    assert await repo_count() == 1

    # under a storm the key waits for the hot-key interval (30 s from the start of its last refresh)
    row = await dirty()
    assert row is not None and row["claimed_by"] is None
    assert 28 <= row["available_in"] <= 29.6
    waiting = await dirty_queue.drain()
    assert (waiting.refreshed, waiting.remaining_claimable) == (0, 0)
    assert waiting.next_available_in_seconds is not None and 28 <= waiting.next_available_in_seconds <= 29.6

    # `tarakan jobs drain` runs everything pending, throttled keys included
    assert await dirty_queue.drain_all() == 1
    assert await repo_count() == 2
    assert await dirty() is None


async def test_a_failing_refresh_keeps_its_key_with_backoff(reporter: Account) -> None:
    repo = await f.create_repository()
    other_title = "Open redirect after login"
    await f.create_instance(repo, reporter, TITLE)
    await f.create_instance(repo, reporter, other_title)
    await mark(KEY, pattern_key(other_title))
    errors_before = REGISTRY.get_sample_value("tarakan_infestations_refresh_errors_total") or 0.0

    async with db.transaction() as session:  # a real database failure for one key only
        await session.execute(
            text(
                "CREATE FUNCTION test_fail_refresh() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                f"IF NEW.pattern_key = '{KEY}' THEN RAISE EXCEPTION 'simulated refresh failure'; END IF; "
                "RETURN NEW; END $$"
            )
        )
        await session.execute(
            text(
                "CREATE TRIGGER test_fail_refresh BEFORE INSERT ON infestation_pattern_instances "
                "FOR EACH ROW EXECUTE FUNCTION test_fail_refresh()"
            )
        )
    try:
        first = await dirty_queue.drain()
        assert (first.refreshed, first.failed) == (1, 1)
        assert first.refreshed_keys == [pattern_key(other_title)]
        row = await dirty()
        assert row is not None
        assert (row["attempts"], row["claimed_by"]) == (1, None)
        assert 1 <= row["available_in"] <= 2
        assert await dirty_queue.drain_all() == 0  # backed off, not spun on

        await execute("UPDATE infestation_dirty_keys SET available_at = now()")  # time passes
        second = await dirty_queue.drain()
        assert second.failed == 1
        row = await dirty()
        assert row is not None and row["attempts"] == 2 and 3 <= row["available_in"] <= 4
    finally:
        async with db.transaction() as session:
            await session.execute(text("DROP TRIGGER test_fail_refresh ON infestation_pattern_instances"))
            await session.execute(text("DROP FUNCTION test_fail_refresh()"))

    errors_after = REGISTRY.get_sample_value("tarakan_infestations_refresh_errors_total") or 0.0
    assert errors_after - errors_before == 2
    await execute("UPDATE infestation_dirty_keys SET available_at = now()")
    assert (await dirty_queue.drain()).refreshed_keys == [KEY]
    assert await repo_count() == 1
    assert await rows("SELECT * FROM infestation_dirty_keys") == []


async def test_concurrent_drains_never_refresh_the_same_key_and_leave_nothing(reporter: Account) -> None:
    repos = [await f.create_repository() for _ in range(2)]
    titles = [f"Concurrent pattern {n}" for n in range(30)]
    await execute(
        "INSERT INTO scans (repository_id, submitted_by_id, commit_sha, model, prompt_version) "
        "SELECT r, :a, repeat('a', 40), 'm', 'v' FROM unnest(CAST(:repos AS bigint[])) AS r",
        a=reporter.id,
        repos=[r.id for r in repos],
    )
    for title in titles:
        for repo in repos:
            canonical = await f.create_canonical(repo, title)
            await execute(
                "INSERT INTO scan_findings (scan_id, file_path, severity, title, description, canonical_finding_id) "
                "SELECT id, 'a.py', 'high', :t, 'd', :c FROM scans WHERE repository_id = :r",
                t=title,
                c=canonical.id,
                r=repo.id,
            )
    await mark(*(pattern_key(t) for t in titles))

    async def worker(name: str) -> list[str]:
        done: list[str] = []
        while True:
            result = await dirty_queue.drain(batch_size=4, throttle=False, worker_id=name)
            done += result.refreshed_keys
            if result.refreshed == 0 and result.remaining_claimable == 0:
                return done

    first, second = await asyncio.gather(worker("worker-1"), worker("worker-2"))

    assert first and second, "both workers should have taken a share"
    assert not set(first) & set(second)
    assert sorted(first + second) == sorted(pattern_key(t) for t in titles)
    assert await rows("SELECT * FROM infestation_dirty_keys") == []
    counts = await rows("SELECT DISTINCT repo_count, instance_count FROM infestation_patterns")
    assert counts == [{"repo_count": 2, "instance_count": 2}]


async def test_a_repository_fan_out_is_drained_200_keys_per_batch(reporter: Account) -> None:
    repo = await f.create_repository()
    scan = await f.create_scan(repo, reporter)
    async with db.transaction() as session:
        await session.execute(
            text(
                "INSERT INTO canonical_findings (repository_id, fingerprint, pattern_key, file_path, severity, title,"
                " description, first_seen_commit_sha, last_seen_commit_sha) "
                "SELECT :r, md5(n::text), encode(sha256(('fan-out ' || n)::bytea), 'hex'), 'a.py', 'low',"
                " 'fan-out ' || n, 'd', :sha, :sha FROM generate_series(1, 205) AS n"
            ),
            {"r": repo.id, "sha": scan.commit_sha},
        )
        await session.execute(
            text(
                "INSERT INTO scan_findings (scan_id, file_path, severity, title, description, canonical_finding_id) "
                "SELECT :s, 'a.py', 'low', title, 'd', id FROM canonical_findings WHERE repository_id = :r"
            ),
            {"s": scan.id, "r": repo.id},
        )
        assert await outbox.mark_repository_dirty(session, repo.id, "listing_change") == 205

    first = await dirty_queue.drain()
    assert (first.refreshed, first.remaining_claimable) == (200, 5)
    assert first.refreshed_keys == sorted(first.refreshed_keys)
    second = await dirty_queue.drain()
    assert (second.refreshed, second.remaining_claimable) == (5, 0)
    assert min(second.refreshed_keys) > max(first.refreshed_keys)


async def test_ringing_the_worker_inside_a_transaction_raises() -> None:
    async with db.transaction():
        with pytest.raises(RuntimeError, match="inside a transaction"):
            await outbox.schedule_refresh_after_commit()


async def test_with_redis_down_a_submitted_report_commits_and_its_keys_wait_in_postgres(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app.reports.service import submit_report

    account = await f.create_account(state="active")
    repo = await f.create_repository()
    body = {
        "commit_sha": f.sha("redis-down"),
        "model": "test-model",
        "prompt_version": "test/v1",
        "document": {
            "tarakan_scan_format": 1,
            "findings": [{"file": "app/settings.py", "severity": "high", "title": TITLE, "description": "d"}],
        },
    }
    monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there

    created = await submit_report(account, repo.host, repo.owner, repo.name, body)

    assert created["findings_count"] == 1
    assert await rows("SELECT id FROM scans") == [{"id": created["id"]}]
    row = await dirty()
    assert row is not None and row["claimed_by"] is None
    monkeypatch.undo()
    assert await dirty_queue.drain_all() == 1
    assert await repo_count() == 1


async def test_a_cancelled_drain_hands_its_unfinished_claims_back_at_once(reporter: Account) -> None:
    """A worker stopping mid-batch (arq cancels the job on SIGTERM) must not leave its keys claimed until the
    claim expires: they are released and the next drain takes them."""
    repo = await f.create_repository()
    other = pattern_key("Another pattern waiting in the batch")
    await f.create_instance(repo, reporter, TITLE)
    await mark(KEY, other)
    async with db.engine().connect() as blocker:
        await blocker.execute(text("SELECT pg_advisory_lock(hashtextextended(:k, 0))"), {"k": KEY})
        await blocker.commit()
        draining = asyncio.create_task(dirty_queue.drain(worker_id="stopping-worker"))
        deadline = time.monotonic() + 10
        while (row := await dirty()) is None or row["claimed_by"] != "stopping-worker":
            assert time.monotonic() < deadline, "the drain never claimed the key"
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)  # the refresh is now waiting on the lock
        draining.cancel()
        with pytest.raises(asyncio.CancelledError):
            await draining
        await blocker.execute(text("SELECT pg_advisory_unlock(hashtextextended(:k, 0))"), {"k": KEY})
        await blocker.commit()
    claims = await rows("SELECT pattern_key, claimed_by FROM infestation_dirty_keys ORDER BY pattern_key")
    assert claims == [{"pattern_key": k, "claimed_by": None} for k in sorted([KEY, other])]
    again = await dirty_queue.drain(throttle=False)
    assert sorted(again.refreshed_keys) == sorted([KEY, other])
    assert await repo_count() == 1


async def test_a_drain_that_refreshed_a_key_records_its_progress_for_the_pipeline_alert(
    reporter: Account, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`job_runs` "drain" (the TarakanRollupPipelineStopped signal, docs/operations.md) moves only with a drain
    that refreshed something, at most every PROGRESS_RECORD_SECONDS per process."""
    from app.ops.gauges import refresh_gauges

    monkeypatch.setattr(dirty_queue, "_progress_recorded_at", None)
    await dirty_queue.drain()  # nothing to do: nothing recorded
    assert await rows("SELECT name FROM job_runs") == []

    await f.create_instance(await f.create_repository(), reporter, TITLE)
    await mark(KEY)
    await dirty_queue.drain()
    [run] = await rows("SELECT name, finished_at, detail FROM job_runs")
    assert run["name"] == "drain" and run["finished_at"] is not None and '"refreshed": 1' in run["detail"]
    await refresh_gauges()
    finished = REGISTRY.get_sample_value("tarakan_job_last_success_timestamp_seconds", {"fleet_job": "drain"})
    assert finished == run["finished_at"].timestamp()

    await mark(KEY)
    await dirty_queue.drain()  # within the interval: the record stands
    assert (await rows("SELECT finished_at FROM job_runs"))[0]["finished_at"] == run["finished_at"]
