"""Read APIs over the rollups: parity with the legacy reference, the window guard, the flag, pages and cursors."""

from __future__ import annotations

import base64
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import text

from app.infestations import maintenance
from app.infestations.memberships import list_pattern_repos_page, list_repository_infestations
from app.infestations.queries import (
    get_infestation,
    list_infestations,
    list_infestations_legacy,
    list_infestations_rollup,
    list_instances,
    list_instances_page,
    list_newest_infestations,
    newest_list_sql,
    parse_pattern_key,
    ranked_list_sql,
)
from app.infestations.rows import INFESTATION_KEYS, INSTANCE_KEYS
from app.kernel import db
from app.kernel.paging import InvalidCursor, decode_cursor, encode_cursor
from app.registry.models import Repository
from app.reports.finding_memory import pattern_key
from tests import factories
from tests.infestations.support import (
    HARDCODED,
    LONER,
    SQLI,
    STATUS_FILTERS,
    TRAVERSAL,
    WINDOW_DAYS,
    XSS,
    ago,
    back_rollups_with_visible_rows,
    build_registry,
    ranked,
    refresh_all,
    shift_clock,
)

# ---------------------------------------------------------------------------------------------------------------
# Parity with the legacy reference


async def test_rollup_list_equals_legacy_for_every_window_and_status() -> None:
    await build_registry()
    await refresh_all()
    compared = 0
    for days in WINDOW_DAYS:
        for status in STATUS_FILTERS:
            for min_repos in (2, 3, 5):
                legacy = await list_infestations_legacy(days=days, min_repos=min_repos, status=status)
                rollup = await list_infestations_rollup(days=days, min_repos=min_repos, status=status)
                assert ranked(rollup) == ranked(legacy), (days, status, min_repos)
                compared += len(legacy)
    assert compared > 40  # the fixture really ranks patterns in most combinations

    # spot-check the fixture's meaning, not just agreement
    by_window = {d: {i["pattern_key"]: i for i in await list_infestations_rollup(days=d)} for d in WINDOW_DAYS}
    assert set(by_window[7]) == {pattern_key(SQLI), pattern_key(XSS)}
    xss = by_window[7][pattern_key(XSS)]
    assert (xss["repo_count"], xss["instance_count"]) == (2, 2)  # three occurrences of one canonical count once
    hardcoded = by_window[365][pattern_key(HARDCODED)]
    assert (hardcoded["repo_count"], hardcoded["instance_count"]) == (4, 5)  # the 400-day canonical is out
    assert pattern_key(LONER) not in by_window[365]
    sqli_all = await get_infestation(pattern_key(SQLI))
    assert sqli_all is not None and sqli_all["repo_count"] == 4  # all-time; pending/quarantined excluded
    assert all(tuple(item) == INFESTATION_KEYS for items in by_window.values() for item in items.values())


async def test_status_filter_counts_only_the_matching_status() -> None:
    await build_registry()
    await refresh_all()
    [traversal] = await list_infestations_rollup(days=90, status="fixed")
    assert traversal["pattern_key"] == pattern_key(TRAVERSAL)
    counts = [traversal[f"{s}_count"] for s in ("open", "verified", "fixed", "disputed")]
    assert counts == [0, 0, 2, 0] and traversal["instance_count"] == 2
    assert traversal["title"] == "Path traversal in upload handler"
    # an unknown status is the unfiltered list
    assert ranked(await list_infestations_rollup(days=90, status="weird")) == ranked(
        await list_infestations_rollup(days=90)
    )


async def test_a_pattern_leaving_the_window_is_cut_by_the_guard_before_any_recompute() -> None:
    author = await factories.create_account()
    repos = [await factories.create_repository() for _ in range(3)]
    for repo in repos[:2]:
        await factories.create_instance(repo, author, SQLI, updated_at=ago(20))
    await factories.create_instance(repos[0], author, XSS, updated_at=ago(5))
    await factories.create_instance(repos[2], author, XSS, updated_at=ago(6))
    await refresh_all((SQLI, XSS))

    assert [i["pattern_key"] for i in await list_infestations_rollup(days=30)] == [pattern_key(XSS), pattern_key(SQLI)]
    # days=14 reads the 30-day columns (SQLi still has 2 repositories there) but the guard drops it
    fourteen = await list_infestations_rollup(days=14)
    assert [i["pattern_key"] for i in fourteen] == [pattern_key(XSS)]
    assert ranked(fourteen) == ranked(await list_infestations_legacy(days=14))

    # twelve days later, before the hourly recompute: the stale 30-day columns still claim 2 repositories for
    # SQLi, whose newest instance is now 32 days old; the guard keeps it off the list
    await shift_clock(12)
    stale = await list_infestations_rollup(days=30)
    assert [i["pattern_key"] for i in stale] == [pattern_key(XSS)]
    assert ranked(stale) == ranked(await list_infestations_legacy(days=30))
    await maintenance.recompute_all_windows()
    row = await _pattern_row(pattern_key(SQLI))
    assert (row["repo_count_30d"], row["last_seen_at_30d"]) == (0, None)
    assert row["repo_count_90d"] == 2


async def test_partial_decay_heals_after_the_window_recompute() -> None:
    author = await factories.create_account()
    repos = [await factories.create_repository() for _ in range(3)]
    for repo, age in zip(repos, (2, 3, 25), strict=True):
        await factories.create_instance(repo, author, SQLI, updated_at=ago(age))
    await refresh_all((SQLI,))
    await shift_clock(10)  # the 25-day repository is now 35 days old
    [before] = await list_infestations_rollup(days=30)
    assert before["repo_count"] == 3  # accepted lag until the hourly recompute
    await maintenance.recompute_all_windows()
    [after] = await list_infestations_rollup(days=30)
    assert after["repo_count"] == 2
    assert ranked([after]) == ranked(await list_infestations_legacy(days=30))


async def _pattern_row(key: str) -> dict[str, Any]:
    async with db.read_session(replica=False) as session:
        row = (
            (await session.execute(text("SELECT * FROM infestation_patterns WHERE pattern_key = :k"), {"k": key}))
            .mappings()
            .one()
        )
    return dict(row)


# ---------------------------------------------------------------------------------------------------------------
# Flag, clamps, rank index


async def test_flag_off_reads_the_legacy_source_at_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    author = await factories.create_account()
    for _ in range(2):
        await factories.create_instance(await factories.create_repository(), author, SQLI)
    # nothing projected yet: the rollup list is empty, the legacy one is not

    def observed(source: str) -> float:
        labels = {"source": source, "window": "30"}
        return REGISTRY.get_sample_value("tarakan_infestations_list_seconds_count", labels) or 0.0

    monkeypatch.setenv("INFESTATIONS_READ_FROM_ROLLUP", "true")
    rollup_before = observed("rollup")
    assert await list_infestations() == []
    assert observed("rollup") == rollup_before + 1
    monkeypatch.setenv("INFESTATIONS_READ_FROM_ROLLUP", "false")
    legacy_before = observed("legacy")
    [item] = await list_infestations()
    assert item["pattern_key"] == pattern_key(SQLI) and observed("legacy") == legacy_before + 1


async def _bulk_patterns(count: int) -> None:
    """`count` rollup rows with deterministic, varied window columns (direct SQL: ranking input only)."""
    columns = []
    for n, w in enumerate(WINDOW_DAYS):
        columns.append(f"(g * {7 + n}) % {5 + 4 * n} AS repo_count_{w}d")
        columns.append(f"now() - ((g * {13 + n}) % ({w} * 24 + 48)) * interval '1 hour' AS last_seen_at_{w}d")
    names = ", ".join(c.rsplit(" AS ", 1)[1] for c in columns)
    async with db.transaction() as session:
        await session.execute(
            text(
                f"INSERT INTO infestation_patterns (pattern_key, title, refreshed_at, {names}) "
                f"SELECT encode(sha256(g::text::bytea), 'hex'), 'pattern ' || g, now(), {', '.join(columns)} "
                "FROM generate_series(1, :n) g"
            ),
            {"n": count},
        )
    await back_rollups_with_visible_rows()


async def test_ranked_list_walks_the_rank_index_of_its_window() -> None:
    await _bulk_patterns(4000)
    async with db.read_session(replica=False) as session:
        rows = (await session.execute(text("SELECT * FROM infestation_patterns"))).mappings().all()
        for w in WINDOW_DAYS:
            since = ago(w)
            plan = "\n".join(
                r[0]
                for r in await session.execute(
                    text("EXPLAIN " + ranked_list_sql(w)), {"min_repos": 2, "since": since, "limit": 40}
                )
            )
            assert f"infestation_patterns_rank_{w}d_idx" in plan, plan
            # and the order is the documented one, computed independently here
            expected = sorted(
                (r for r in rows if r[f"repo_count_{w}d"] >= 3 and r[f"last_seen_at_{w}d"] >= since),
                key=lambda r: (-r[f"repo_count_{w}d"], -r[f"last_seen_at_{w}d"].timestamp(), r["pattern_key"]),
            )[:40]
            got = await list_infestations_rollup(days=w, min_repos=3, limit=40)
            assert [i["pattern_key"] for i in got] == [r["pattern_key"] for r in expected]
            assert len(got) == 40


async def test_newest_list_walks_its_index_in_first_sighting_order() -> None:
    """The atlas feed's "new" half reads the newest first sightings of patterns in two or more repositories from
    `infestation_patterns_first_seen_idx` (a sort of every pattern cost 39 ms of Postgres at Tier B)."""
    await _bulk_patterns(4000)
    async with db.transaction() as session:
        await session.execute(
            text(
                "UPDATE infestation_patterns SET repo_count = 1 + (hashtext(pattern_key) & 3),"
                " first_seen_at = CASE WHEN hashtext(pattern_key) % 7 = 0 THEN NULL"
                " ELSE now() - (hashtext(pattern_key) & 65535) * interval '1 minute' END"
            )
        )
    async with db.read_session(replica=False) as session:
        await session.execute(text("ANALYZE infestation_patterns"))
        plan = "\n".join(r[0] for r in await session.execute(text("EXPLAIN " + newest_list_sql()), {"limit": 25}))
        rows = (await session.execute(text("SELECT * FROM infestation_patterns"))).mappings().all()
    assert "infestation_patterns_first_seen_idx" in plan, plan
    expected = sorted(
        (r for r in rows if r["repo_count"] >= 2 and r["first_seen_at"] is not None),
        key=lambda r: (-r["first_seen_at"].timestamp(), r["pattern_key"]),
    )[:25]
    got = await list_newest_infestations(limit=25)
    assert [i["pattern_key"] for i in got] == [r["pattern_key"] for r in expected]


async def test_list_clamps_odd_integers_instead_of_raising() -> None:
    await _bulk_patterns(400)
    assert len(await list_infestations_rollup(limit=1000, days=365)) == 100
    assert len(await list_infestations_rollup(limit=0, days=365)) == 1
    assert len(await list_infestations_rollup(limit=-5, days=-3)) == 1
    # min_repos 1 is clamped up to 2, 1000 down to 50 (nothing has 50 repositories here)
    ones = await list_infestations_rollup(min_repos=1, days=365, limit=100)
    assert ones and min(i["repo_count"] for i in ones) >= 2
    assert await list_infestations_rollup(min_repos=1000, days=365) == []
    # days beyond 365 read the 365-day columns; 0 reads the 7-day ones with a one-day guard
    assert ranked(await list_infestations_rollup(days=5000)) == ranked(await list_infestations_rollup(days=365))
    for item in await list_infestations_rollup(days=0, limit=100):
        assert item["last_seen_at"] >= ago(1)


# ---------------------------------------------------------------------------------------------------------------
# Show page reads


async def test_get_infestation_is_all_time_and_none_when_missing() -> None:
    await build_registry()
    await refresh_all()
    item = await get_infestation(pattern_key(HARDCODED))
    assert item is not None and tuple(item) == INFESTATION_KEYS
    assert (item["repo_count"], item["instance_count"], item["verified_count"]) == (5, 6, 2)
    assert await get_infestation(pattern_key("never reported anywhere")) is None
    assert await get_infestation("not-a-key") is None
    assert await get_infestation(pattern_key(HARDCODED).upper()) is None


async def _add_instances(repos: list[Repository], key: str, stamps: list[datetime]) -> list[int]:
    """Canonical + instance rows straight in SQL (a few hundred ledger entries without a few hundred reports); each
    instance's sample report `1000 + n` is a real public report, so the read-time guard shows it."""
    ids: list[int] = []
    author = await factories.create_account()
    async with db.transaction() as session:
        await session.execute(
            text(
                "INSERT INTO scans (id, repository_id, submitted_by_id, commit_sha) "
                "SELECT 1000 + g, :repo, :author, md5(g::text) || '00000000' FROM generate_series(0, :n - 1) g"
            ),
            {"repo": repos[0].id, "author": author.id, "n": len(stamps)},
        )
        for n, stamp in enumerate(stamps):
            repo = repos[n % len(repos)]
            canonical_id = (
                await session.execute(
                    text(
                        "INSERT INTO canonical_findings (repository_id, fingerprint, pattern_key, title, status, "
                        "severity, file_path, first_seen_commit_sha, last_seen_commit_sha, detections_count, "
                        "confirmations_count, inserted_at, updated_at) "
                        "VALUES (:repo, :fp, :key, 'Ledger entry', 'open', 'high', :path, :sha, :sha, :n, 1, :t, :t) "
                        "RETURNING id"
                    ),
                    {
                        "repo": repo.id,
                        "fp": uuid.uuid4().hex,
                        "key": key,
                        "path": f"src/f{n}.py",
                        "sha": factories.sha(n),
                        "n": n,
                        "t": stamp,
                    },
                )
            ).scalar_one()
            await session.execute(
                text(
                    "INSERT INTO infestation_pattern_instances (canonical_finding_id, pattern_key, repository_id, "
                    "status, severity, title, file_path, sample_occurrence_public_id, sample_scan_id, "
                    "sample_commit_sha, inserted_at, updated_at) "
                    "VALUES (:id, :key, :repo, 'open', 'high', 'Ledger entry', :path, :occ, :scan, :sha, :t, :t)"
                ),
                {
                    "id": canonical_id,
                    "key": key,
                    "repo": repo.id,
                    "path": f"src/f{n}.py",
                    "occ": uuid.uuid4(),
                    "scan": 1000 + n,
                    "sha": factories.sha(n),
                    "t": stamp,
                },
            )
            ids.append(canonical_id)
    return ids


async def test_instance_ledger_pages_walk_every_instance_once_newest_first() -> None:
    repos = [await factories.create_repository() for _ in range(3)]
    key = pattern_key(SQLI)
    base = db.utcnow()
    # 320 instances; every three share a timestamp so the canonical id must break ties
    stamps = [base - timedelta(minutes=n // 3) for n in range(320)]
    ids = await _add_instances(repos, key, stamps)
    expected = [i for _, i in sorted(zip(stamps, ids, strict=True), key=lambda p: (p[0], p[1]), reverse=True)]

    walked: list[int] = []
    cursor = None
    pages = 0
    while True:
        page = await list_instances_page(key, cursor=cursor)
        pages += 1
        assert len(page["entries"]) == (50 if page["next_cursor"] else 320 - 50 * (pages - 1))
        walked += [e["id"] for e in page["entries"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert walked == expected and pages == 7

    first = (await list_instances_page(key, limit=1))["entries"][0]
    assert tuple(first) == INSTANCE_KEYS
    assert first["id"] == expected[0] and first["scan_id"] == 1000 + ids.index(expected[0])
    assert first["commit_sha"] == factories.sha(ids.index(expected[0]))
    assert isinstance(first["public_id"], str) and isinstance(first["occurrence_public_id"], str)
    assert (first["host"], first["detections_count"], first["confirmations_count"]) == (
        "github.com",
        ids.index(expected[0]),
        1,
    )

    assert len(await list_instances(key)) == 100
    assert [e["id"] for e in await list_instances(key, limit=1000)] == expected[:300]
    assert len((await list_instances_page(key, limit=1000))["entries"]) == 100
    assert len(await list_instances(key, limit=0)) == 1
    assert await list_instances(pattern_key(XSS)) == []
    assert (await list_instances_page("garbage"))["entries"] == []


async def test_pattern_repos_page_and_repository_infestations() -> None:
    key = pattern_key(SQLI)
    async with db.transaction() as session:
        await session.execute(
            text(
                "INSERT INTO repositories (host, owner, name, canonical_url) "
                "SELECT 'github.com', 'owner' || g, 'repo' || g, 'https://github.com/owner' || g || '/repo' || g "
                "FROM generate_series(1, 120) g"
            )
        )
        # last seen g/2 hours ago: pairs tie, the repository id breaks the tie
        await session.execute(
            text(
                "INSERT INTO infestation_pattern_repos (pattern_key, repository_id, instance_count, open_count, "
                "primary_status, title, first_seen_at, last_seen_at) "
                "SELECT :key, r.id, r.id % 4 + 1, r.id % 2, 'open', 'SQLi', now() - interval '30 days', "
                "now() - (r.id / 2) * interval '1 hour' FROM repositories r"
            ),
            {"key": key},
        )
        for n, (title, repos) in enumerate(((SQLI, 120), (XSS, 9), (TRAVERSAL, 2))):
            await session.execute(
                text(
                    "INSERT INTO infestation_patterns (pattern_key, title, repo_count, refreshed_at) VALUES (:k, :t, :c, now())"
                ),
                {"k": pattern_key(title), "t": title, "c": repos},
            )
            if n:
                await session.execute(
                    text(
                        "INSERT INTO infestation_pattern_repos (pattern_key, repository_id, instance_count, "
                        "primary_status, last_seen_at) VALUES (:k, 5, 1, 'verified', now())"
                    ),
                    {"k": pattern_key(title)},
                )
    await back_rollups_with_visible_rows()
    first = await list_pattern_repos_page(key)
    assert len(first["entries"]) == 64 and first["next_cursor"] is not None
    second = await list_pattern_repos_page(key, cursor=first["next_cursor"])
    assert len(second["entries"]) == 56 and second["next_cursor"] is None
    walked = [e["repository_id"] for e in first["entries"] + second["entries"]]
    # ages r.id/2 hours (integer division): 0 for id 1, 1 for ids 2-3, ...; newest first, ties by id DESC
    assert walked == sorted(range(1, 121), key=lambda r: (r // 2, -r))
    entry = first["entries"][0]
    assert set(entry) == {
        "id", "repository_id", "repository_uuid", "host", "owner", "name", "status", "severity", "title",
        "instance_count", "open_count", "occurrence_public_id", "updated_at",
    }  # fmt: skip
    assert (entry["id"], entry["owner"], entry["name"], entry["status"]) == (1, "owner1", "repo1", "open")
    assert len((await list_pattern_repos_page(key, limit=500))["entries"]) == 100

    mine = await list_repository_infestations(5)
    assert [i["pattern_key"] for i in mine] == [pattern_key(SQLI), pattern_key(XSS), pattern_key(TRAVERSAL)]
    assert mine[1]["repository_status"] == "verified" and mine[1]["repo_count"] == 9
    assert len(await list_repository_infestations(5, limit=1)) == 1
    shared = await list_repository_infestations(5, min_repos=3)
    assert [i["pattern_key"] for i in shared] == [pattern_key(SQLI), pattern_key(XSS)]


def _b64(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "raw",
    [
        "not-a-cursor",
        "",
        _b64("[]"),
        _b64("not json"),
        _b64('["2025-01-01T00:00:00", 1]'),  # naive timestamp
        _b64('["yesterday", 1]'),
        _b64('["2025-01-01T00:00:00+00:00", "1"]'),  # id is a string
        _b64('["2025-01-01T00:00:00+00:00", true]'),
        _b64('["2025-01-01T00:00:00+00:00", -4]'),
        _b64('{"at": "2025-01-01T00:00:00+00:00", "id": 1}'),
        encode_cursor(datetime(2025, 1, 1, tzinfo=UTC), 5) + "!",
        "x" * 500,
    ],
)
async def test_a_malformed_cursor_is_a_400_naming_the_field(raw: str) -> None:
    key = pattern_key(SQLI)
    for call in (list_instances_page, list_pattern_repos_page):
        with pytest.raises(InvalidCursor) as raised:
            await call(key, cursor=raw)
        assert raised.value.status_code == 400 and list(raised.value.errors) == ["cursor"]


def test_cursor_round_trip_and_pattern_key_parsing() -> None:
    stamp = db.utcnow()
    assert decode_cursor(encode_cursor(stamp, 42)) == (stamp, 42)
    key = pattern_key(SQLI)
    assert parse_pattern_key(key) == key
    for bad in (key.upper(), key[:-1], key + "0", "", None, 7, "g" * 64):
        assert parse_pattern_key(bad) is None
