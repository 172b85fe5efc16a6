"""The legacy online reads (docs/domain.md §4) with the §11 leaks fixed: the reference every rollup read is held to."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from sqlalchemy import text

from app.infestations.legacy import get_infestation_legacy, list_infestations_legacy, list_instances_legacy
from app.infestations.rows import INFESTATION_KEYS, INSTANCE_KEYS
from app.kernel import db
from app.kernel.paging import InvalidCursor
from app.reports.finding_memory import pattern_key
from tests import factories

SQLI = "SQL injection via string concatenation"
XSS = "Reflected XSS via q param"


def ago(days: float) -> datetime:
    return db.utcnow() - timedelta(days=days)


async def test_counts_distinct_canonicals_over_the_public_join_only() -> None:
    author = await factories.create_account()
    listed = [await factories.create_repository() for _ in range(3)]
    pending = await factories.create_repository(listing_status="pending")
    quarantined = await factories.create_repository(listing_status="quarantined")
    # one canonical re-detected by three public reports still counts once
    _, canonical, _ = await factories.create_instance(listed[0], author, SQLI)
    for _ in range(2):
        again = await factories.create_scan(listed[0], author)
        await factories.create_occurrence(again, canonical)
    await factories.create_instance(listed[1], author, SQLI, status="verified")
    await factories.create_instance(listed[1], author, SQLI.upper(), status="fixed")  # same key, second canonical
    # none of these count: summary-only and restricted reports, unlisted repositories
    await factories.create_instance(listed[2], author, SQLI, visibility="public_summary")
    await factories.create_instance(listed[2], author, SQLI, visibility="restricted")
    await factories.create_instance(pending, author, SQLI)
    await factories.create_instance(quarantined, author, SQLI)

    [item] = await list_infestations_legacy()
    assert item["pattern_key"] == pattern_key(SQLI)
    assert (item["repo_count"], item["instance_count"]) == (2, 3)
    assert (item["open_count"], item["verified_count"], item["fixed_count"], item["disputed_count"]) == (1, 1, 1, 0)
    assert tuple(item) == INFESTATION_KEYS
    # a third listed repository with a public occurrence lifts it to 3
    await factories.create_instance(listed[2], author, SQLI, status="disputed")
    [item] = await list_infestations_legacy()
    assert item["repo_count"] == 3 and item["disputed_count"] == 1


async def test_window_status_filter_and_min_repos() -> None:
    author = await factories.create_account()
    repos = [await factories.create_repository() for _ in range(4)]
    for repo, days in zip(repos, (3, 20, 60, 200), strict=True):
        await factories.create_instance(repo, author, SQLI, updated_at=ago(days), inserted_at=ago(days))
    await factories.create_instance(repos[0], author, XSS, status="verified", updated_at=ago(1))
    await factories.create_instance(repos[1], author, XSS, status="verified", updated_at=ago(2))

    by_days = {
        d: {i["pattern_key"]: i["repo_count"] for i in await list_infestations_legacy(days=d)} for d in (7, 30, 90, 365)
    }
    assert by_days[7] == {pattern_key(XSS): 2}  # SQLi has one repository inside 7 days
    assert by_days[30][pattern_key(SQLI)] == 2
    assert by_days[90][pattern_key(SQLI)] == 3
    assert by_days[365][pattern_key(SQLI)] == 4
    # legacy first_seen_at is window-scoped: the oldest canonical inside the window
    [sqli_30] = [i for i in await list_infestations_legacy(days=30) if i["pattern_key"] == pattern_key(SQLI)]
    assert ago(21) < sqli_30["first_seen_at"] < ago(19)

    verified = await list_infestations_legacy(days=365, status="verified")
    assert [i["pattern_key"] for i in verified] == [pattern_key(XSS)]
    assert (verified[0]["verified_count"], verified[0]["open_count"]) == (2, 0)
    # an unknown status is no filter; min_repos below 2 is clamped to 2, above 50 to 50
    assert len(await list_infestations_legacy(days=365, status="bogus")) == 2
    assert [i["pattern_key"] for i in await list_infestations_legacy(days=365, min_repos=3)] == [pattern_key(SQLI)]
    assert await list_infestations_legacy(days=365, min_repos=1000) == []


async def test_ranking_ties_break_on_pattern_key() -> None:
    author = await factories.create_account()
    repos = [await factories.create_repository() for _ in range(2)]
    stamp = ago(1)
    titles = [f"Shared weakness number {n}" for n in range(6)]
    for title in titles:
        for repo in repos:
            await factories.create_instance(repo, author, title, updated_at=stamp)
    keys = [i["pattern_key"] for i in await list_infestations_legacy(limit=4)]
    assert keys == sorted(pattern_key(t) for t in titles)[:4]


async def test_representative_and_sample_come_from_the_public_join() -> None:
    author = await factories.create_account()
    a, b = await factories.create_repository(), await factories.create_repository()
    hidden = await factories.create_repository(listing_status="quarantined")
    # the newest open canonical sits in a quarantined repository: its title must not leak
    await factories.create_instance(hidden, author, "SQL injection via string concatenation!!", updated_at=ago(0))
    _, rep, old_public = await factories.create_instance(
        a, author, "sql injection via string concatenation", updated_at=ago(1)
    )
    await factories.create_instance(b, author, SQLI, status="fixed", updated_at=ago(0.5))
    # newer occurrences of the representative: one public (the sample), one restricted (never the sample)
    soon = db.utcnow() + timedelta(seconds=5)
    newer_public_scan = await factories.create_scan(a, author, inserted_at=soon)
    newer_public = await factories.create_occurrence(newer_public_scan, rep)
    restricted_scan = await factories.create_scan(
        a, author, visibility="restricted", inserted_at=soon + timedelta(seconds=5)
    )
    await factories.create_occurrence(restricted_scan, rep)

    [item] = await list_infestations_legacy()
    assert item["title"] == "sql injection via string concatenation"  # open preferred over the newer fixed one
    assert item["sample_occurrence_public_id"] == str(newer_public.public_id) != str(old_public.public_id)
    assert item["sample_file_path"] == rep.file_path
    shown = await get_infestation_legacy(pattern_key(SQLI))
    assert shown is not None and shown["title"] == item["title"] and shown["repo_count"] == 2


async def test_get_is_all_time_and_none_without_public_instances() -> None:
    author = await factories.create_account()
    repo = await factories.create_repository()
    await factories.create_instance(repo, author, SQLI, updated_at=ago(500), inserted_at=ago(500))
    await factories.create_instance(repo, author, XSS, visibility="restricted")
    item = await get_infestation_legacy(pattern_key(SQLI))
    assert item is not None and item["repo_count"] == 1 and item["instance_count"] == 1
    assert item["first_seen_at"] < ago(499)
    assert await get_infestation_legacy(pattern_key(XSS)) is None
    assert await get_infestation_legacy("") is None


async def test_instances_are_newest_first_with_their_newest_public_occurrence() -> None:
    author = await factories.create_account()
    repos = [await factories.create_repository() for _ in range(3)]
    canonicals = []
    for n in range(7):
        scan, canonical, _ = await factories.create_instance(repos[n % 3], author, SQLI, updated_at=ago(10 - n))
        canonicals.append((scan, canonical))
    # canonical 0 gets a newer public report (its commit is shown) and a newer restricted one (ignored)
    newer = await factories.create_scan(repos[0], author, inserted_at=db.utcnow() + timedelta(seconds=5))
    newest_public = await factories.create_occurrence(newer, canonicals[0][1])
    hidden = await factories.create_scan(
        repos[0], author, visibility="restricted", inserted_at=db.utcnow() + timedelta(seconds=9)
    )
    await factories.create_occurrence(hidden, canonicals[0][1])
    async with db.transaction() as session:  # one updated_at for three canonicals: the id breaks the tie
        await session.execute(
            text("UPDATE canonical_findings SET updated_at = :t WHERE id = ANY(CAST(:ids AS bigint[]))"),
            {"t": ago(3), "ids": [c.id for _, c in canonicals[4:]]},
        )

    seen: list[int] = []
    cursor = None
    while True:
        page = await list_instances_legacy(pattern_key(SQLI), limit=2, cursor=cursor)
        assert len(page["entries"]) <= 2
        seen += [e["id"] for e in page["entries"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    ids = [c.id for _, c in canonicals]
    # updated_at ages 10, 9, 8, 7, then 3, 3, 3 days: newest first, ties by id DESC
    assert seen == [ids[6], ids[5], ids[4], ids[3], ids[2], ids[1], ids[0]]
    first = (await list_instances_legacy(pattern_key(SQLI), limit=10))["entries"]
    oldest = first[-1]
    assert tuple(oldest) == INSTANCE_KEYS
    assert oldest["commit_sha"] == newer.commit_sha and oldest["scan_id"] == newer.id
    assert oldest["occurrence_public_id"] == str(newest_public.public_id)
    assert oldest["public_id"] == str(canonicals[0][1].public_id)
    assert (oldest["host"], oldest["owner"], oldest["name"]) == (repos[0].host, repos[0].owner, repos[0].name)


async def test_instances_reject_a_forged_cursor() -> None:
    with pytest.raises(InvalidCursor) as raised:
        await list_instances_legacy(pattern_key(SQLI), cursor="not-a-cursor")
    assert raised.value.status_code == 400 and "cursor" in raised.value.errors
