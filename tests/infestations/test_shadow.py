"""Shadow-compare: zero mismatches when the rollups are consistent, a precise description when they are not."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import text

from app.infestations import projection
from app.infestations.legacy import list_infestations_legacy
from app.infestations.queries import list_infestations_rollup
from app.infestations.shadow import describe_mismatches, shadow_compare, shadow_compare_all
from app.kernel import db
from app.reports.finding_memory import pattern_key
from tests import factories
from tests.infestations.support import HARDCODED, SQLI, TRAVERSAL, XSS, build_registry, refresh_all, shift_clock


def mismatches_counted() -> float:
    return REGISTRY.get_sample_value("tarakan_infestations_shadow_mismatches_total") or 0.0


async def execute(sql: str, **params: object) -> None:
    async with db.transaction() as session:
        await session.execute(text(sql), params)


async def test_consistent_rollups_have_no_mismatch_anywhere() -> None:
    await build_registry()
    await refresh_all()
    before = mismatches_counted()
    assert await shadow_compare_all() == []
    assert mismatches_counted() == before


async def test_a_corrupted_rollup_row_is_reported_counted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    await build_registry()
    await refresh_all()
    await execute(
        "UPDATE infestation_patterns SET repo_count_30d = repo_count_30d + 5 WHERE pattern_key = :k",
        k=pattern_key(TRAVERSAL),
    )
    before = mismatches_counted()
    with caplog.at_level(logging.WARNING, logger="app.infestations.shadow"):
        problems = await shadow_compare(days=30, min_repos=2, status=None)
    short = pattern_key(TRAVERSAL)[:12]
    assert f"days=30 min_repos=2 status=all: {short} repo_count: legacy 3, rollup 8" in problems
    assert any(p.startswith("days=30 min_repos=2 status=all: order differs at rank 1") for p in problems)
    assert mismatches_counted() == before + len(problems)
    assert sum("infestation shadow mismatch" in r.getMessage() for r in caplog.records) == len(problems)
    # other windows are untouched
    assert await shadow_compare(days=90, min_repos=2, status=None) == []
    everywhere = await shadow_compare_all()
    assert everywhere and all("days=30" in p for p in everywhere)


async def test_a_stale_instance_status_shows_in_the_status_filtered_comparison() -> None:
    await build_registry()
    await refresh_all()
    # the canonical moved to "verified" in source but no hook refreshed the rollup
    await execute(
        "UPDATE canonical_findings SET status = 'verified' WHERE pattern_key = :k AND status = 'open'",
        k=pattern_key(XSS),
    )
    assert await shadow_compare(days=7, min_repos=2, status="open") == [
        f"days=7 min_repos=2 status=open: keys only in rollup: {pattern_key(XSS)[:12]}"
    ]
    verified = await shadow_compare(days=7, min_repos=2, status="verified")
    assert verified == [f"days=7 min_repos=2 status=verified: keys only in legacy: {pattern_key(XSS)[:12]}"]


async def test_a_window_crossed_since_the_recompute_is_lag_not_a_mismatch() -> None:
    await build_registry()
    await refresh_all()
    hardcoded, traversal = pattern_key(HARDCODED), pattern_key(TRAVERSAL)
    # HARDCODED's verified canonical in repository 1 is 30 minutes inside the 30-day window at its refresh; an hour
    # later it is outside, and until the hourly recompute both 30-day list forms still count repository 1
    await execute(
        "UPDATE canonical_findings SET updated_at = now() - interval '30 days' + interval '30 minutes' "
        "WHERE pattern_key = :k AND status = 'verified' AND updated_at > now() - interval '21 days'",
        k=hardcoded,
    )
    await projection.refresh_pattern(hardcoded)
    await shift_clock(1 / 24)
    for status in (None, "verified"):
        rollup = await list_infestations_rollup(days=30, status=status)
        legacy = await list_infestations_legacy(days=30, status=status)
        assert hardcoded in [i["pattern_key"] for i in rollup] and hardcoded not in [i["pattern_key"] for i in legacy]
        assert await shadow_compare(days=30, min_repos=2, status=status) == []
    # at limit 3 the lagging key pushed XSS past the rollup list's end: compared over the ranks both lists cover
    assert await shadow_compare(days=30, min_repos=2, status=None, limit=3) == []
    # another key's corrupted status-window row is still reported
    await execute(
        "UPDATE infestation_pattern_status_windows SET repo_count = repo_count + 5 "
        "WHERE pattern_key = :k AND status = 'verified' AND window_days = 30",
        k=traversal,
    )
    assert await shadow_compare(days=30, min_repos=2, status="verified") == [
        f"days=30 min_repos=2 status=verified: {traversal[:12]} repo_count: legacy 2, rollup 7"
    ]
    await refresh_all((TRAVERSAL,))
    # the recompute catches up: nothing to skip, and the lists agree
    await projection.recompute_windows(hardcoded)
    assert hardcoded not in [i["pattern_key"] for i in await list_infestations_rollup(days=30, status="verified")]
    assert await shadow_compare_all() == []


async def test_a_missed_hook_is_caught_until_the_key_is_refreshed() -> None:
    await build_registry()
    await refresh_all()
    author = await factories.create_account()
    for _ in range(3):  # three new repositories report SQLi, nobody refreshes the rollup
        await factories.create_instance(await factories.create_repository(), author, SQLI)
    problems = await shadow_compare(days=7, min_repos=2, status=None)
    assert f"days=7 min_repos=2 status=all: {pattern_key(SQLI)[:12]} repo_count: legacy 5, rollup 2" in problems
    await refresh_all((SQLI,))
    assert await shadow_compare_all() == []


async def test_a_deleted_rollup_row_is_a_missing_key() -> None:
    await build_registry()
    await refresh_all()
    await execute("DELETE FROM infestation_patterns WHERE pattern_key = :k", k=pattern_key(HARDCODED))
    problems = await shadow_compare(days=365, min_repos=2, status=None)
    assert problems == [f"days=365 min_repos=2 status=all: keys only in legacy: {pattern_key(HARDCODED)[:12]}"]


def test_describe_mismatches_reports_order_and_dates() -> None:
    stamp = db.utcnow()
    a = {"pattern_key": "a" * 64, "repo_count": 3, "instance_count": 3, "last_seen_at": stamp}
    b = {"pattern_key": "b" * 64, "repo_count": 3, "instance_count": 3, "last_seen_at": stamp}
    for item in (a, b):
        item.update(open_count=3, verified_count=0, fixed_count=0, disputed_count=0)
    assert describe_mismatches([a, b], [a, b]) == []
    assert describe_mismatches([a, b], [b, a]) == ["order differs at rank 1: legacy aaaaaaaaaaaa, rollup bbbbbbbbbbbb"]
    later = {**b, "last_seen_at": None}
    assert describe_mismatches([a, b], [a, later]) == [f"bbbbbbbbbbbb last_seen_at: legacy {stamp}, rollup None"]
