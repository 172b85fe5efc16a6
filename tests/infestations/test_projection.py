"""refresh_pattern / recompute_windows / reconcile / backfill against real Postgres (docs/domain.md §13 "Recompute algorithm")."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from app.accounts.models import Account
from app.infestations import maintenance, projection
from app.kernel import db
from app.kernel.sql import WINDOW_DAYS
from app.reports.finding_memory import pattern_key
from tests import factories as f
from tests.sql import execute, one, rows

TITLE = "SQL injection in login handler"
KEY = pattern_key(TITLE)


async def pattern(key: str = KEY) -> dict[str, Any] | None:
    return await one("SELECT * FROM infestation_patterns WHERE pattern_key = :k", k=key)


async def projection_sizes(key: str = KEY) -> tuple[int, int, int]:
    row = await one(
        "SELECT (SELECT count(*) FROM infestation_patterns WHERE pattern_key = :k) AS p,"
        " (SELECT count(*) FROM infestation_pattern_repos WHERE pattern_key = :k) AS m,"
        " (SELECT count(*) FROM infestation_pattern_instances WHERE pattern_key = :k) AS i",
        k=key,
    )
    assert row is not None
    return int(row["p"]), int(row["m"]), int(row["i"])


async def hard_delete_repository(repository_id: int) -> None:
    """The rows a hard repository delete removes, in the order the RESTRICT key on occurrences needs; without the
    service's dirty-key hook, to stand for a missed hook."""
    async with db.transaction() as session:
        for sql in (
            "DELETE FROM scan_findings WHERE scan_id IN (SELECT id FROM scans WHERE repository_id = :id)",
            "DELETE FROM scans WHERE repository_id = :id",
            "DELETE FROM canonical_findings WHERE repository_id = :id",
            "DELETE FROM repositories WHERE id = :id",
        ):
            await session.execute(text(sql), {"id": repository_id})


def ago(days: float) -> datetime:
    return db.utcnow() - timedelta(days=days)


@pytest.fixture
async def reporter() -> Account:
    return await f.create_account()


async def test_a_canonical_with_many_occurrences_counts_once(reporter: Account) -> None:
    repo_a, repo_b = await f.create_repository(), await f.create_repository()
    _, canonical, _ = await f.create_instance(repo_a, reporter, TITLE)
    for _ in range(4):  # re-detected by four more public reports
        await f.create_occurrence(await f.create_scan(repo_a, reporter), canonical)
    await f.create_instance(repo_b, reporter, TITLE, status="verified")

    assert await projection.refresh_pattern(KEY) == 2

    p = await pattern()
    assert p is not None
    assert (p["repo_count"], p["instance_count"], p["open_count"], p["verified_count"]) == (2, 2, 1, 1)
    assert (p["repo_count_30d"], p["instance_count_30d"]) == (2, 2)
    membership = await one(
        "SELECT * FROM infestation_pattern_repos WHERE pattern_key = :k AND repository_id = :r", k=KEY, r=repo_a.id
    )
    assert membership is not None
    assert (membership["instance_count"], membership["open_count"], membership["primary_status"]) == (1, 1, "open")


async def test_only_public_occurrences_count_and_the_sample_is_the_newest_public_one(reporter: Account) -> None:
    restricted_repo, summary_repo, public_repo = [await f.create_repository() for _ in range(3)]
    # open canonicals would be preferred as representative: they must not leak through restricted/summary reports
    await f.create_instance(restricted_repo, reporter, "SQL Injection in login handler!!", visibility="restricted")
    await f.create_instance(summary_repo, reporter, "sql injection in LOGIN handler", visibility="public_summary")
    old_public = await f.create_scan(public_repo, reporter, inserted_at=ago(3))
    canonical = await f.create_canonical(public_repo, TITLE, status="verified", commit_sha=old_public.commit_sha)
    await f.create_occurrence(old_public, canonical)
    new_public = await f.create_scan(public_repo, reporter, inserted_at=ago(2))
    newest_public = await f.create_occurrence(new_public, canonical)
    restricted_latest = await f.create_scan(public_repo, reporter, visibility="restricted", inserted_at=ago(1))
    await f.create_occurrence(restricted_latest, canonical)

    assert await projection.refresh_pattern(KEY) == 1

    p = await pattern()
    assert p is not None
    assert (p["repo_count"], p["instance_count"], p["open_count"], p["verified_count"]) == (1, 1, 0, 1)
    assert p["title"] == TITLE
    assert p["sample_occurrence_public_id"] == newest_public.public_id
    instance = await one("SELECT * FROM infestation_pattern_instances WHERE pattern_key = :k", k=KEY)
    assert instance is not None
    assert instance["repository_id"] == public_repo.id
    assert instance["sample_occurrence_public_id"] == newest_public.public_id
    assert instance["sample_scan_id"] == new_public.id
    assert instance["sample_commit_sha"] == new_public.commit_sha
    repos = await rows("SELECT repository_id, sample_occurrence_public_id FROM infestation_pattern_repos")
    assert repos == [{"repository_id": public_repo.id, "sample_occurrence_public_id": newest_public.public_id}]


@pytest.mark.parametrize("listing", ["quarantined", "pending"])
async def test_a_delisted_repository_is_removed_by_refresh(reporter: Account, listing: str) -> None:
    kept, delisted = await f.create_repository(), await f.create_repository()
    await f.create_instance(kept, reporter, TITLE)
    await f.create_instance(delisted, reporter, TITLE)
    await projection.refresh_pattern(KEY)
    assert await projection_sizes() == (1, 2, 2)

    await execute("UPDATE repositories SET listing_status = :l WHERE id = :id", l=listing, id=delisted.id)
    assert await projection.refresh_pattern(KEY, reason="listing_change") == 1

    p = await pattern()
    assert p is not None
    assert (p["repo_count"], p["repo_count_7d"], p["instance_count"]) == (1, 1, 1)
    members = await rows("SELECT repository_id FROM infestation_pattern_repos WHERE pattern_key = :k", k=KEY)
    assert members == [{"repository_id": kept.id}]


async def test_an_emptied_pattern_is_hard_deleted(reporter: Account) -> None:
    repo = await f.create_repository()
    scan, _, _ = await f.create_instance(repo, reporter, TITLE)
    await projection.refresh_pattern(KEY)
    assert await projection_sizes() == (1, 1, 1)

    await execute("UPDATE scans SET visibility = 'restricted' WHERE id = :id", id=scan.id)
    assert await projection.refresh_pattern(KEY, reason="visibility") == 0
    assert await projection_sizes() == (0, 0, 0)


async def test_representative_is_open_first_then_newest(reporter: Account) -> None:
    repos = [await f.create_repository() for _ in range(3)]
    await f.create_instance(repos[0], reporter, TITLE, status="verified", updated_at=ago(0.1))
    await f.create_instance(repos[1], reporter, "sql injection in login handler.", updated_at=ago(5))
    _, newest_open, occurrence = await f.create_instance(
        repos[2], reporter, "Critical: SQL injection in login handler", updated_at=ago(1)
    )
    await projection.refresh_pattern(KEY)
    p = await pattern()
    assert p is not None
    assert p["title"] == newest_open.title
    assert p["sample_file_path"] == newest_open.file_path
    assert p["sample_occurrence_public_id"] == occurrence.public_id
    assert (p["open_count"], p["verified_count"]) == (2, 1)


# Direct recomputation from source (the legacy semantics, docs/domain.md §4.1) for one window or all time.
_DIRECT = """
SELECT count(DISTINCT c.repository_id) AS repo_count, count(DISTINCT c.id) AS instance_count,
  count(DISTINCT c.id) FILTER (WHERE c.status = 'open') AS open_count,
  count(DISTINCT c.id) FILTER (WHERE c.status = 'verified') AS verified_count,
  count(DISTINCT c.id) FILTER (WHERE c.status = 'fixed') AS fixed_count,
  count(DISTINCT c.id) FILTER (WHERE c.status = 'disputed') AS disputed_count,
  max(c.updated_at) AS last_seen_at
FROM canonical_findings c
JOIN repositories r ON r.id = c.repository_id
JOIN scan_findings f ON f.canonical_finding_id = c.id
JOIN scans s ON s.id = f.scan_id
WHERE c.pattern_key = :k AND r.listing_status = 'listed' AND s.visibility = 'public'
  AND c.updated_at >= now() - make_interval(hours => :hours)
"""


async def test_window_columns_equal_a_direct_count_for_each_window(reporter: Account) -> None:
    repos = [await f.create_repository() for _ in range(5)]
    ages_and_statuses = [
        (0.5, "open"),
        (3, "verified"),
        (6, "fixed"),
        (20, "disputed"),
        (45, "open"),
        (80, "verified"),
        (200, "open"),
        (300, "fixed"),
        (500, "open"),
    ]
    for n, (age, status) in enumerate(ages_and_statuses):
        await f.create_instance(repos[n % 5], reporter, TITLE, status=status, updated_at=ago(age))
    # noise that must not count: a restricted report and a quarantined repository, both fresh
    await f.create_instance(repos[0], reporter, TITLE.upper(), visibility="restricted", updated_at=ago(1))
    quarantined = await f.create_repository(listing_status="quarantined")
    await f.create_instance(quarantined, reporter, TITLE, updated_at=ago(1))

    await projection.refresh_pattern(KEY)
    p = await pattern()
    assert p is not None
    for w in WINDOW_DAYS:
        direct = await one(_DIRECT, k=KEY, hours=w * 24)
        assert direct is not None
        stored = {name: p[f"{name}_{w}d"] for name in direct}
        assert stored == direct, f"window {w}d"
    all_time = await one(_DIRECT, k=KEY, hours=100 * 365 * 24)
    assert all_time is not None
    assert {name: p[name] for name in all_time} == all_time
    assert (p["repo_count_7d"], p["instance_count_7d"], p["repo_count"], p["instance_count"]) == (3, 3, 5, 9)


async def test_recompute_windows_ages_a_pattern_out_from_the_instance_table_only(reporter: Account) -> None:
    repo_a, repo_b = await f.create_repository(), await f.create_repository()
    await f.create_instance(repo_a, reporter, TITLE, updated_at=ago(2))
    await f.create_instance(repo_b, reporter, TITLE, updated_at=ago(3))
    await projection.refresh_pattern(KEY)
    before = await pattern()
    assert before is not None
    assert (before["repo_count_7d"], before["repo_count_30d"]) == (2, 2)

    # Time passes for the instance rows only: a source join would bring the 7-day counts back.
    await execute("UPDATE infestation_pattern_instances SET updated_at = updated_at - interval '6 days'")
    await projection.recompute_windows(KEY)

    after = await pattern()
    assert after is not None
    assert (after["repo_count_7d"], after["instance_count_7d"], after["last_seen_at_7d"]) == (0, 0, None)
    assert (after["repo_count_30d"], after["instance_count_30d"]) == (2, 2)
    assert after["last_seen_at_30d"] == before["last_seen_at_30d"] - timedelta(days=6)
    assert after["refreshed_at"] > before["refreshed_at"]
    # all-time columns are left alone by the cheap path
    assert after["last_seen_at"] == before["last_seen_at"]


async def test_recompute_windows_without_instances_deletes_and_without_pattern_row_refreshes(
    reporter: Account,
) -> None:
    repo = await f.create_repository()
    await f.create_instance(repo, reporter, TITLE)
    await projection.refresh_pattern(KEY)

    await execute("DELETE FROM infestation_patterns WHERE pattern_key = :k", k=KEY)
    await projection.recompute_windows(KEY)
    assert await projection_sizes() == (1, 1, 1)

    # a hard repository delete cascades instances and memberships away; the pattern row is left behind
    await hard_delete_repository(repo.id)
    assert await projection_sizes() == (1, 0, 0)
    await projection.recompute_windows(KEY)
    assert await projection_sizes() == (0, 0, 0)


async def test_a_canonical_whose_key_changed_moves_to_the_new_key(reporter: Account) -> None:
    repo, other = await f.create_repository(), await f.create_repository()
    _, canonical, _ = await f.create_instance(repo, reporter, TITLE)
    await f.create_instance(other, reporter, TITLE)
    await projection.refresh_pattern(KEY)

    new_title = "Cross-site scripting in search"
    new_key = pattern_key(new_title)
    await execute(
        "UPDATE canonical_findings SET pattern_key = :nk, title = :t WHERE id = :id",
        nk=new_key,
        t=new_title,
        id=canonical.id,
    )
    assert await projection.refresh_pattern(new_key) == 1
    moved = await one(
        "SELECT pattern_key FROM infestation_pattern_instances WHERE canonical_finding_id = :id", id=canonical.id
    )
    assert moved == {"pattern_key": new_key}
    await projection.refresh_pattern(KEY)
    old = await pattern()
    assert old is not None
    assert (old["repo_count"], old["instance_count"]) == (1, 1)


async def test_reconcile_projects_missed_keys_and_deletes_orphans(reporter: Account) -> None:
    titles = [f"Missed hook number {n}" for n in range(3)]
    repos = [await f.create_repository() for _ in range(2)]
    for title in titles:
        for repo in repos:
            await f.create_instance(repo, reporter, title)
    gone = await f.create_repository()
    await f.create_instance(gone, reporter, "Only in a deleted repository")
    await projection.refresh_pattern(pattern_key("Only in a deleted repository"))
    await hard_delete_repository(gone.id)  # leaves an orphan pattern row

    lines: list[str] = []
    summary = await maintenance.reconcile(progress=lines.append)

    assert summary == {"source_keys": 3, "refreshed": 3, "orphans_checked": 4, "orphans_removed": 1}
    keys = await rows("SELECT pattern_key, repo_count FROM infestation_patterns ORDER BY pattern_key")
    assert keys == [{"pattern_key": k, "repo_count": 2} for k in sorted(pattern_key(t) for t in titles)]
    assert await rows("SELECT pattern_key FROM infestation_dirty_keys") == []
    run = await one("SELECT * FROM job_runs WHERE name = 'reconcile'")
    assert run is not None and run["finished_at"] is not None
    assert json.loads(run["detail"])["result"] == summary
    assert any(line.startswith("reconcile source: 3 keys") for line in lines)


async def test_backfill_and_recompute_all_windows_visit_every_key(reporter: Account) -> None:
    repo = await f.create_repository()
    titles = [f"Backfilled pattern {n}" for n in range(4)]
    for title in titles:
        await f.create_instance(repo, reporter, title)
    await f.create_instance(repo, reporter, "Never public", visibility="restricted")

    lines: list[str] = []
    assert await maintenance.backfill(progress=lines.append) == 4
    assert lines[-1] == "backfill: done, 4 keys refreshed"
    assert lines[0].startswith("backfill: range 1/1 [-, -): 4 keys, 4 instances")
    assert {r["pattern_key"] for r in await rows("SELECT pattern_key FROM infestation_patterns")} == {
        pattern_key(t) for t in titles
    }
    # the filled tables are analyzed at once (the drain's multi-key plans read their statistics)
    analyzed = await rows(
        "SELECT relname, reltuples FROM pg_class WHERE relname IN "
        "('infestation_patterns', 'infestation_pattern_repos', 'infestation_pattern_instances') ORDER BY relname"
    )
    assert [(r["relname"], r["reltuples"]) for r in analyzed] == [
        ("infestation_pattern_instances", 4),
        ("infestation_pattern_repos", 4),
        ("infestation_patterns", 4),
    ]
    assert await maintenance.recompute_all_windows() == 4


async def test_concurrent_ranged_backfill_projects_exactly_what_a_serial_one_does(reporter: Account) -> None:
    from app.infestations.shadow import shadow_compare_all

    repos = [await f.create_repository() for _ in range(3)]
    for n in range(9):
        for repo in repos[: 1 + n % 3]:
            await f.create_instance(repo, reporter, f"Concurrent pattern {n}", status=("open", "fixed")[n % 2])
    serial = await maintenance.backfill(progress=None)
    before = await rows("SELECT * FROM infestation_pattern_repos ORDER BY pattern_key, repository_id")
    counts = await rows("SELECT pattern_key, repo_count, instance_count FROM infestation_patterns ORDER BY 1")
    async with db.transaction() as session:
        for table in ("infestation_patterns", "infestation_pattern_instances", "infestation_pattern_repos"):
            await session.execute(text(f"DELETE FROM {table}"))
    assert await rows("SELECT pattern_key FROM infestation_pattern_repos") == []
    assert await maintenance.backfill(progress=None, concurrency=4, ranges=16) == serial == 9
    assert await rows("SELECT pattern_key, repo_count, instance_count FROM infestation_patterns ORDER BY 1") == counts
    after = await rows("SELECT * FROM infestation_pattern_repos ORDER BY pattern_key, repository_id")
    strip = ("inserted_at", "updated_at")
    assert [{k: v for k, v in r.items() if k not in strip} for r in after] == [
        {k: v for k, v in r.items() if k not in strip} for r in before
    ]
    assert await shadow_compare_all() == []
