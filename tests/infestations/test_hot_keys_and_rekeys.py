"""The hot-key cap between refreshes (product decision 1) and re-keyed canonicals (docs/domain.md §5.5, §5.6)."""

from __future__ import annotations

from app.infestations import dirty_queue
from app.kernel import db
from app.record import outbox
from app.reports.finding_memory import legacy_normalize, pattern_key
from app.reports.service import submit_report
from tests import factories as f
from tests.reports.support import insert_v1_finding
from tests.sql import rows

HOT, COLD = "Hard-coded credentials in settings", "Weak session secret"
HOT_KEY, COLD_KEY = pattern_key(HOT), pattern_key(COLD)


async def _mark(*keys: str) -> None:
    async with db.transaction() as session:
        await outbox.mark_dirty(session, keys, "assimilate")


async def _available_in(key: str) -> float | None:
    found = await rows(
        "SELECT EXTRACT(EPOCH FROM available_at - now()) AS s FROM infestation_dirty_keys WHERE pattern_key = :k",
        k=key,
    )
    return float(found[0]["s"]) if found else None


async def test_a_key_dirtied_right_after_its_refresh_waits_for_the_cap_while_a_cold_key_is_refreshed_at_once() -> None:
    author = await f.create_account()
    for _ in range(2):
        repo = await f.create_repository()
        await f.create_instance(repo, author, HOT)
        await f.create_instance(repo, author, COLD)
    await _mark(HOT_KEY)
    assert (await dirty_queue.drain()).refreshed_keys == [HOT_KEY]  # refreshed just now

    for n in range(5):  # a sustained storm on the hot key, one change on a cold key beside it each time
        cold = COLD_KEY if n == 0 else pattern_key(f"{COLD} {n}")
        await _mark(HOT_KEY)
        await _mark(cold)
        result = await dirty_queue.drain()
        assert result.refreshed_keys == [cold]  # the cold key's lag is one drain, not the hot key's interval
        waiting = await _available_in(HOT_KEY)
        assert waiting is not None and 25 <= waiting <= 30  # deferred to 30 s after its last refresh
        assert result.remaining_claimable == 0 and result.next_available_in_seconds is not None
    # `tarakan jobs drain` (no throttle) still runs everything pending
    assert await dirty_queue.drain_all() == 1 and await _available_in(HOT_KEY) is None


async def test_a_canonical_re_keyed_by_assimilation_dirties_its_old_key_in_the_same_transaction() -> None:
    submitter = await f.create_account(platform_role="moderator")  # exempt from the submission rate limits
    repo = await f.create_repository()
    title = "Verified: Likely: SQL Injection in `users.py`!"
    old_key = pattern_key(legacy_normalize(title))
    assert old_key != pattern_key(title)
    scan = await f.create_scan(repo, submitter)
    await insert_v1_finding(
        repo.id, scan.id, scan.commit_sha, title, path="lib/users.py", line_start=10, line_end=None, key=old_key
    )
    await _mark(old_key)
    await dirty_queue.drain_all()
    assert await rows("SELECT 1 FROM infestation_pattern_instances WHERE pattern_key = :k", k=old_key)

    body = {
        "commit_sha": f.sha("rekey"),
        "model": "m",
        "prompt_version": "p/v1",
        "document": {
            "tarakan_scan_format": 1,
            "findings": [
                {"file": "lib/users.py", "line_start": 10, "severity": "high", "title": title, "description": "again"}
            ],
        },
    }
    await submit_report(submitter, repo.host, repo.owner, repo.name, body)
    dirty = {r["pattern_key"] for r in await rows("SELECT pattern_key FROM infestation_dirty_keys")}
    assert dirty == {old_key, pattern_key(title)}  # committed with the report, before any worker runs
    await dirty_queue.drain_all()
    assert not await rows("SELECT 1 FROM infestation_patterns WHERE pattern_key = :k", k=old_key)
    assert await rows("SELECT 1 FROM infestation_pattern_instances WHERE pattern_key = :k", k=pattern_key(title))
