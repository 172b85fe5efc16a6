"""Keyset pages and streams of listed repositories and indexable findings (docs/domain.md §7.1, §7.4)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from sqlalchemy import text

from app.kernel import db
from app.kernel.paging import encode_id_cursor
from app.registry.listing import list_listed_repositories_page, stream_listed_repositories
from app.reports.indexable import list_indexable_findings_page, stream_indexable_findings
from tests import factories


async def add_repositories(count: int, listing: str = "listed", prefix: str = "r") -> list[int]:
    async with db.transaction() as session:
        result = await session.execute(
            text(
                """
                INSERT INTO repositories (host, owner, name, canonical_url, listing_status)
                SELECT 'github.com', :prefix || g, 'n', 'https://github.com/x', :listing
                FROM generate_series(1, CAST(:count AS int)) g ORDER BY g
                RETURNING id
                """
            ),
            {"count": count, "listing": listing, "prefix": prefix},
        )
        return sorted(result.scalars())


class SessionWatch:
    """Wraps db._own_reader (what a public read opens: its pooled connection) to see how many a stream opens and
    whether one stays open between pages."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.opened = 0
        self.open_now = 0

    @asynccontextmanager
    async def __call__(self) -> AsyncIterator[db.Reader]:
        self.opened += 1
        self.open_now += 1
        try:
            async with self.real() as read:
                yield read
        finally:
            self.open_now -= 1


async def test_page_is_listed_only_id_ascending_with_a_cursor() -> None:
    listed = await add_repositories(5)
    await add_repositories(3, listing="quarantined", prefix="q")
    await add_repositories(3, listing="pending", prefix="p")
    first = await list_listed_repositories_page(limit=2)
    assert [r["id"] for r in first["entries"]] == listed[:2]
    assert first["next_cursor"] == encode_id_cursor(listed[1])
    assert set(first["entries"][0]) >= {"id", "host", "owner", "name", "updated_at"}
    second = await list_listed_repositories_page(limit=2, cursor=first["next_cursor"])
    assert [r["id"] for r in second["entries"]] == listed[2:4]
    last = await list_listed_repositories_page(limit=2, cursor=second["next_cursor"])
    assert [r["id"] for r in last["entries"]] == listed[4:]
    assert last["next_cursor"] is None  # nothing follows: no empty extra round trip
    exact = await list_listed_repositories_page(limit=5)
    assert exact["next_cursor"] is None
    bounded = await list_listed_repositories_page(limit=10, after_id=listed[0], before_id=listed[3])
    assert [r["id"] for r in bounded["entries"]] == listed[1:3]


async def test_limits_are_clamped() -> None:
    await add_repositories(5_010)
    assert len((await list_listed_repositories_page(limit=0))["entries"]) == 1
    assert len((await list_listed_repositories_page(limit=-5))["entries"]) == 1
    assert len((await list_listed_repositories_page(limit=100_000))["entries"]) == 5_000
    assert len((await list_listed_repositories_page())["entries"]) == 1_000


async def test_stream_yields_every_listed_repository_once_with_a_short_session_per_page(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    listed = await add_repositories(7)
    await add_repositories(2, listing="quarantined", prefix="q")
    watch = SessionWatch(db._own_reader)
    monkeypatch.setattr(db, "_own_reader", watch)
    seen = []
    async for repository in stream_listed_repositories(page_size=3):
        assert watch.open_now == 0  # the consumer runs with no session held
        seen.append(repository["id"])
    assert seen == listed
    assert watch.opened == 3  # 3 + 3 + 1 rows: three pages, no trailing empty query


async def test_indexable_findings_are_public_reports_on_listed_repositories_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    account = await factories.create_account()
    listed = await factories.create_repository()
    quarantined = await factories.create_repository(listing_status="quarantined")
    pending = await factories.create_repository(listing_status="pending")
    _, verified, a = await factories.create_instance(listed, account, "Verified one", status="verified")
    _, _, b = await factories.create_instance(listed, account, "Open one")
    await factories.create_instance(listed, account, "Summary", visibility="public_summary")
    await factories.create_instance(listed, account, "Restricted", visibility="restricted")
    await factories.create_instance(quarantined, account, "Hidden")
    await factories.create_instance(pending, account, "Pending")
    async with db.transaction() as session:
        await session.execute(
            text("UPDATE canonical_findings SET confirmations_count = 2 WHERE id = :id"), {"id": verified.id}
        )

    page = await list_indexable_findings_page()
    assert [(f["public_id"], f["status"], f["confirmations_count"]) for f in page["entries"]] == [
        (a.public_id, "verified", 2),
        (b.public_id, "open", 0),
    ]
    assert page["next_cursor"] is None
    assert page["entries"][0]["updated_at"] is not None

    watch = SessionWatch(db._own_reader)
    monkeypatch.setattr(db, "_own_reader", watch)
    streamed = [f["public_id"] async for f in stream_indexable_findings(page_size=1)]
    assert streamed == [a.public_id, b.public_id]
    assert watch.opened == 2


async def test_indexable_page_skips_long_runs_of_hidden_occurrences() -> None:
    account = await factories.create_account()
    repo = await factories.create_repository()
    hidden_scan = await factories.create_scan(repo, account, visibility="restricted")
    public_scan = await factories.create_scan(repo, account)
    async with db.transaction() as session:
        for scan_id, count in ((public_scan.id, 1), (hidden_scan.id, 3_000), (public_scan.id, 2)):
            await session.execute(
                text(
                    "INSERT INTO scan_findings (scan_id, file_path, severity, title, description) "
                    "SELECT :scan, 'a.py', 'low', 't', 'd' FROM generate_series(1, CAST(:n AS int))"
                ),
                {"scan": scan_id, "n": count},
            )
    page = await list_indexable_findings_page(limit=2)
    assert len(page["entries"]) == 2
    rest = await list_indexable_findings_page(limit=2, cursor=page["next_cursor"])
    assert len(rest["entries"]) == 1
    assert rest["entries"][0]["id"] > 3_000
    assert rest["next_cursor"] is None
