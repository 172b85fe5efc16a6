"""Rendered once per version (issue 26, Deliver 2; app.record.rendered): anonymous public pages are served from
memory until the parts of the data version it shows move; a takedown moves every page at the next request, a new
report the pages that show reports, a rollup refresh the atlas; ETag/304 without rendering; bounded in bytes;
signed-in viewers bypass it."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from sqlalchemy import text

from app.devservices import Standby
from app.kernel import db
from app.kernel.metrics import RENDER_CACHE_EVICTIONS
from app.moderation import service as moderation
from app.record import rendered
from e2e.seed import SeededPattern, seed_pattern
from tests import factories
from tests.conftest import caught_up
from tests.kernel.test_replica import _on_standby, _reads_the_standby, pause_replay, real_replica  # noqa: F401
from tests.moderation.support import NOTES, act_as
from tests.record.support import kept_show_page, requests, retitle_behind_the_cache, store

pytestmark = pytest.mark.usefixtures("fresh_render_cache")


async def test_a_second_anonymous_request_is_served_from_memory_and_a_304_renders_nothing(
    client: httpx.AsyncClient,
) -> None:
    seeded, path, first = await kept_show_page(client, "Cached pattern")
    etag = first.headers["ETag"]
    renders, hits = store().renders, store().hits
    await retitle_behind_the_cache(seeded.key, "Changed behind the cache")
    second = await client.get(path)
    assert second.text == first.text  # the bytes kept in memory, not a new read
    assert (store().renders, store().hits) == (renders, hits + 1)
    before = requests("hit")
    not_modified = await client.get(path, headers={"If-None-Match": etag})
    assert not_modified.status_code == 304 and not_modified.content == b""
    assert not_modified.headers["ETag"] == etag and "xkey" in not_modified.headers
    assert store().renders == renders and requests("hit") == before + 1
    # a fragment (htmx) and the twin are other pages of their own
    assert "Changed behind the cache" in (await client.get(path, headers={"HX-Request": "true"})).text
    assert "Changed behind the cache" in (await client.get(f"{path}.json")).text


async def test_a_kept_page_is_rendered_again_once_it_is_max_age_old(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Window exits are decided at read time: nothing written, the page is still read again after MAX_AGE_SECONDS."""
    seeded, path, _ = await kept_show_page(client, "Aging pattern")
    await retitle_behind_the_cache(seeded.key, "Read again")
    assert "Read again" not in (await client.get(path)).text
    monkeypatch.setattr(rendered, "MAX_AGE_SECONDS", 0.0)
    assert "Read again" in (await client.get(path)).text


async def test_a_signed_in_viewer_bypasses_the_cache(client: httpx.AsyncClient) -> None:
    seeded, path, _ = await kept_show_page(client, "Bypassed pattern")
    renders, hits = store().renders, store().hits
    await retitle_behind_the_cache(seeded.key, "Seen by the moderator")
    await act_as(client, await factories.create_account(platform_role="moderator", state="active"))
    assert "Seen by the moderator" in (await client.get(path)).text  # read now, not served from memory
    assert (store().renders, store().hits) == (renders, hits)  # and not kept either


def repository_ids(answer: httpx.Response) -> set[int]:
    assert answer.status_code == 200, answer.text
    return {entry["repository_id"] for entry in answer.json()["instances"]["entries"]}


async def test_takedowns_change_every_affected_page_at_the_next_request(client: httpx.AsyncClient) -> None:
    seeded = await seed_pattern("Taken down pattern", repos=3)
    moderator = await factories.create_account(platform_role="moderator", state="active")
    quarantined, restricted, kept = seeded.repositories
    slug = f"/repos/{quarantined.host}/{quarantined.owner}/{quarantined.name}"
    show, twin = f"/infestations/{seeded.key}", f"/infestations/{seeded.key}.json"
    documents = [f"{slug}/badge.svg", f"{slug}/findings.sarif", f"{slug}/reports.atom"]
    pages = [show, twin, f"/infestations/{seeded.key}.atom", "/infestations", "/", "/index.json", *documents]
    for path in pages:  # kept, then served from memory
        assert (await client.get(path)).status_code == 200, path
    hits = store().hits
    for path in pages:
        assert (await client.get(path)).status_code == 200, path
    assert store().hits == hits + len(pages)
    assert repository_ids(await client.get(twin)) == {r.id for r in seeded.repositories}
    assert quarantined.name in (await client.get(show)).text

    await moderation.change_repository_listing(
        moderator, quarantined.host, quarantined.owner, quarantined.name, "quarantined", "takedown", NOTES
    )
    renders = store().renders
    assert repository_ids(await client.get(twin)) == {restricted.id, kept.id}
    assert quarantined.name not in (await client.get(show)).text
    assert quarantined.name not in (await client.get(f"/infestations/{seeded.key}.atom")).text
    for path in documents:
        assert (await client.get(path)).status_code == 404, path
    for path in ("/infestations", "/", "/index.json"):  # rendered again, not served across the takedown
        assert (await client.get(path)).status_code == 200, path
    assert store().renders == renders + 6  # the 404s are not kept

    async with db.read_session(replica=False) as session:
        scan_id = (
            await session.execute(text("SELECT id FROM scans WHERE repository_id = :r"), {"r": restricted.id})
        ).scalar_one()
    await moderation.change_scan_visibility(moderator, scan_id, "restricted", "takedown", NOTES)
    assert repository_ids(await client.get(twin)) == {kept.id}
    assert restricted.name not in (await client.get(show)).text


async def seed_second(first: SeededPattern) -> SeededPattern:
    return await seed_pattern("Second pattern", repos=3, name_prefix="second")


async def test_a_new_report_and_a_refresh_change_the_index(client: httpx.AsyncClient) -> None:
    first = await seed_pattern("First pattern", repos=2)
    index = await client.get("/infestations.json")
    assert [item["pattern_key"] for item in index.json()["items"]] == [first.key]
    second = await seed_second(first)  # new reports, then the rollup refresh that projects them
    keys = [item["pattern_key"] for item in (await client.get("/infestations.json")).json()["items"]]
    assert keys == [second.key, first.key]
    # a report alone (no refresh yet) moves the pages that show reports, not the atlas (its `Scope`): the home twin
    # is read again, the index is kept until a refresh (tests/record/test_rendered_scopes.py)
    await client.get("/index.json")
    renders = store().renders
    repository = await factories.create_repository("acme", "fresh")
    await factories.create_scan(repository, await factories.create_account())
    await client.get("/infestations.json")
    await client.get("/index.json")
    assert store().renders == renders + 1


async def test_the_cache_stays_within_its_bytes(client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch) -> None:
    await seed_pattern("Bounded pattern", repos=2)
    assert (await client.get("/infestations.json?days=20")).status_code == 200
    size = store().bytes  # one kept twin (every window from 20 to 31 days lists the pattern: the same size)
    monkeypatch.setenv("RENDER_CACHE_BYTES", str(size * rendered.ENTRY_SHARE + size // 2))
    rendered.reset()
    evictions: float = RENDER_CACHE_EVICTIONS._value.get()
    for days in range(20, 32):  # twelve pages of one size: eight fit
        assert (await client.get(f"/infestations.json?days={days}")).status_code == 200
    bounded = store()
    assert bounded.bytes <= bounded.max_bytes and len(bounded) <= rendered.ENTRY_SHARE
    assert RENDER_CACHE_EVICTIONS._value.get() - evictions >= 12 - rendered.ENTRY_SHARE
    renders = bounded.renders
    await client.get("/infestations.json?days=31")  # the newest is still there
    assert bounded.renders == renders
    await client.get("/infestations.json?days=20")  # the least recently used was dropped
    assert bounded.renders == renders + 1


async def test_a_page_read_from_the_standby_is_kept_under_the_standby_version(
    client: httpx.AsyncClient,
    real_replica: Standby,  # noqa: F811 (the fixture imported above)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The version is read where the page is read: while the standby has not replayed a new report it keeps
    answering the page it shows; a takedown it has not replayed sends version and page to the primary; once it
    replays, its version is the one the primary's page was kept under."""
    monkeypatch.setenv("DATABASE_REPLICA_MAX_LAG", "600")  # paused replay must not read as lag here
    monkeypatch.setattr(rendered, "MAX_AGE_SECONDS", 3600.0)
    seeded = await seed_pattern("Replicated pattern", repos=2)
    quarantined, kept = seeded.repositories
    moderator = await factories.create_account(platform_role="moderator", state="active")
    twin = f"/infestations/{seeded.key}.json"
    caught_up(real_replica)
    assert repository_ids(await client.get(twin)) == {quarantined.id, kept.id}
    assert await _reads_the_standby()
    renders = store().renders

    pause_replay(real_replica)
    repository = await factories.create_repository("acme", "later")
    await factories.create_scan(repository, moderator)  # moves the primary's version, not the standby's
    await retitle_behind_the_cache(seeded.key, "Changed on the primary")
    standby_page = await client.get(twin)
    assert "Changed on the primary" not in standby_page.text and store().renders == renders

    await moderation.change_repository_listing(
        moderator, quarantined.host, quarantined.owner, quarantined.name, "quarantined", "takedown", NOTES
    )
    assert repository_ids(await client.get(twin)) == {kept.id}  # version and page from the primary
    assert store().renders == renders + 1

    _on_standby(real_replica, "SELECT pg_wal_replay_resume()")
    caught_up(real_replica)
    assert repository_ids(await client.get(twin)) == {kept.id}
    assert await _reads_the_standby() and store().renders == renders + 1  # the standby's version is the kept one


async def test_a_version_read_is_shared_only_by_requests_that_arrived_before_it_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One version read answers every request that came in while the one before it ran (rendered.shared_version),
    but a request never joins the read already running: its snapshot may predate a takedown committed before the
    request arrived. The running read is held in Postgres (a transaction advisory lock taken after its snapshot)."""
    seeded = await seed_pattern("Shared read pattern", repos=2)
    moderator = await factories.create_account(platform_role="moderator", state="active")
    lock = 262626
    held = rendered.VERSION_SQL.text + f", pg_advisory_xact_lock_shared({lock}) AS held"
    monkeypatch.setattr(rendered, "VERSION_SQL", text(held))
    reads = store().version_reads
    engine = db.engine()
    async with engine.connect() as blocker:
        await blocker.execute(text("SELECT pg_advisory_lock(:k)"), {"k": lock})
        await blocker.commit()
        first = asyncio.create_task(rendered.shared_version())
        while not (  # the first read has its snapshot and waits on the lock
            await blocker.execute(
                text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = :k AND NOT granted"),
                {"k": lock},
            )
        ).scalar_one():
            await blocker.commit()
            await asyncio.sleep(0.01)
        await blocker.commit()
        quarantined = seeded.repositories[0]
        await moderation.change_repository_listing(
            moderator, quarantined.host, quarantined.owner, quarantined.name, "quarantined", "takedown", NOTES
        )
        async with db.read_session(replica=False) as session:
            marker = int((await session.execute(text("SELECT max(id) FROM audit_events"))).scalar_one())
        after = [asyncio.create_task(rendered.shared_version()) for _ in range(3)]
        await asyncio.sleep(0)  # they arrive while the first read still waits
        assert not first.done()
        await blocker.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": lock})
        await blocker.commit()
    (old, _), *later = [await task for task in (first, *after)]
    assert old[0] < marker  # the first read's snapshot is from before the takedown
    assert all(version[0] >= marker for version, _ in later)  # the later requests never got it
    assert len({version for version, _ in later}) == 1
    assert store().version_reads == reads + 2  # the three later requests shared one read
