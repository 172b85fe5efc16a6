"""The atlas filters over HTTP, each answer compared with the domain's rule (docs/domain.md §5.7, §4.1), not with a
recomputation from the source tables: `days` is any integer clamped to 1..365, read from the smallest window
bucket covering it with the `last_seen_at_{w}d >= now - days` guard; `min_repos` is clamped to 2..50; a value that
is not an integer is the default. The twin states what it applied; the form shows a non-standard value."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest

from app.infestations.rows import window_bucket
from app.kernel import db
from e2e.seed import account, seed_pattern
from e2e.soup import attr, one, soup
from tests.sql import rows

# (title, repositories, age in days of its newest instance)
AGES = [("Fresh pattern", 3, 0.5), ("Ten days", 4, 10), ("Twenty days", 2, 20), ("Forty-five days", 5, 45)]
AGES += [("Two hundred days", 2, 200), ("Three hundred days", 3, 300), ("Older than a year", 4, 380)]


async def seed_ages() -> None:
    submitter = await account()
    now = db.utcnow()
    for i, (title, repos, age) in enumerate(AGES):
        # each repository's instance one minute apart, the newest `age` days ago
        start = now - timedelta(days=age) - timedelta(minutes=repos)
        await seed_pattern(title, repos=repos, name_prefix=f"a{i}", submitter=submitter, start=start)


async def domain_rule(days: int, min_repos: int) -> list[dict[str, Any]]:
    """The rollup read of §5.7 on the pattern rows: the covering bucket's counts, the real-days guard."""
    w = window_bucket(days)
    return await rows(
        f"SELECT pattern_key, repo_count_{w}d AS repo_count FROM infestation_patterns "
        f"WHERE repo_count_{w}d >= :min_repos AND last_seen_at_{w}d >= now() - make_interval(days => :days) "
        f"ORDER BY repo_count_{w}d DESC, last_seen_at_{w}d DESC NULLS LAST, pattern_key",
        min_repos=min_repos,
        days=days,
    )


@pytest.mark.parametrize(
    ("raw", "applied"),
    [("1", 1), ("14", 14), ("31", 31), ("200", 200), ("365", 365), ("400", 365), ("-3", 1), ("abc", 30)],
)
async def test_days_reads_the_covering_bucket_with_the_real_days_guard(
    client: httpx.AsyncClient, raw: str, applied: int
) -> None:
    await seed_ages()
    twin = (await client.get("/infestations.json", params={"days": raw})).json()
    expected = await domain_rule(applied, 2)
    assert [(i["pattern_key"], i["repo_count"]) for i in twin["items"]] == [
        (r["pattern_key"], r["repo_count"]) for r in expected
    ]
    assert twin["filters"] == {
        "days": applied,
        "min_repos": 2,
        "status": "all",
        "limit": 50,
        "counts_window_days": window_bucket(applied),
    }
    page = await client.get("/infestations", params={"days": raw})
    assert attr(one(soup(page), "select[name=days] option[selected]"), "value") == str(applied)
    assert f'</infestations.json?days={applied}&min_repos=2&status=all>; rel="alternate"' in page.headers["Link"]


async def test_days_between_buckets_differ_from_the_bucket_itself() -> None:
    """The data above tells the cases apart: 14 days drops the 20-day pattern the 30-day bucket keeps, 31 days
    keeps the 45-day pattern out while 90 days has it, 400 days is the 365-day view without the 380-day one."""
    await seed_ages()
    keys = {days: {r["pattern_key"] for r in await domain_rule(days, 2)} for days in (1, 14, 30, 31, 90, 365)}
    assert len(keys[1]) == 1 and len(keys[14]) == 2 and len(keys[30]) == 3 and keys[31] == keys[30]
    assert len(keys[90]) == 4 and len(keys[365]) == 6


@pytest.mark.parametrize(("raw", "applied"), [("1", 2), ("4", 4), ("21", 21), ("999", 50), ("x", 2)])
async def test_min_repos_is_clamped_to_the_domain_range(client: httpx.AsyncClient, raw: str, applied: int) -> None:
    submitter = await account()
    for repos in (2, 4, 5, 21):
        await seed_pattern(f"Spread over {repos}", repos=repos, name_prefix=f"m{repos}", submitter=submitter)
    twin = (await client.get("/infestations.json", params={"min_repos": raw})).json()
    expected = await domain_rule(30, applied)
    assert [i["pattern_key"] for i in twin["items"]] == [r["pattern_key"] for r in expected]
    assert all(i["repo_count"] >= applied for i in twin["items"])
    assert twin["filters"]["min_repos"] == applied
    page = await client.get("/infestations", params={"min_repos": raw})
    assert attr(one(soup(page), "select[name=min_repos] option[selected]"), "value") == str(applied)


async def test_counts_window_days_names_the_window_whose_counts_are_served(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rollups serve the covering bucket's counts with or without a status filter (the real days only guard
    the rows); the legacy aggregate counts the real days."""
    await seed_ages()
    for status in ("open", "all"):
        twin = (await client.get("/infestations.json", params={"days": "14", "status": status})).json()
        assert [i["title"] for i in twin["items"]] == ["Ten days", "Fresh pattern"]
        assert twin["filters"]["counts_window_days"] == 30
    monkeypatch.setenv("INFESTATIONS_READ_FROM_ROLLUP", "false")
    twin = (await client.get("/infestations.json", params={"days": "14", "status": "open"})).json()
    assert [i["title"] for i in twin["items"]] == ["Ten days", "Fresh pattern"]
    assert twin["filters"]["counts_window_days"] == 14
