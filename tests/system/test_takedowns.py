"""Takedowns hold at the very next request on every public surface, with no worker running (docs/domain.md §5.7
"Read-time guard"); the atlas counts follow after a drain. The rollup flag switches every atlas read to the legacy
path: with the rollup tables emptied and the flag off, every atlas page and twin equals the recomputation.

No worker runs in these tests: a takedown rings arq after its commit, but nothing drains until `drain_all`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx
import pytest
from sqlalchemy import text

from app.accounts.models import Account
from app.infestations.dirty_queue import drain_all
from app.infestations.queries import get_infestation
from app.kernel import db
from app.moderation.account_actions import change_account
from app.moderation.service import (
    change_repository_listing,
    change_scan_visibility,
    delete_repository,
)
from app.registry.models import Repository
from app.reports.checks import record_check
from app.reports.finding_memory import pattern_key
from app.reports.models import Scan
from tests import factories
from tests.record.support import bodies

TITLE = "Open redirect after login"
KEY = pattern_key(TITLE)
LONE_TITLE = "Debug console exposed"  # only in the repository taken down: its pattern must vanish
LONE_KEY = pattern_key(LONE_TITLE)
REASON, NOTES = "takedown", "taken down by the takedown test of every public surface"


async def _finding(repo: Repository, author: Account, title: str, path: str) -> tuple[Scan, str]:
    scan = await factories.create_scan(repo, author)
    canonical = await factories.create_canonical(repo, title, file_path=path, commit_sha=scan.commit_sha)
    occurrence = await factories.create_occurrence(scan, canonical)
    return scan, str(occurrence.public_id)


class World:
    """Pattern KEY in three listed repositories (the secret one holds its newest, representative instance), and
    LONE_KEY in the secret one only, drained once."""

    moderator: Account
    secret: Repository
    secret_scan: Scan
    secret_marks: tuple[str, ...]
    report_marks: tuple[str, ...]

    async def build(self) -> None:
        author = await factories.create_account()
        self.moderator = await factories.create_account(platform_role="moderator")
        others = [await factories.create_repository(f"keeper{n}", f"kept{n}") for n in range(2)]
        for n, repo in enumerate(others):
            await _finding(repo, author, TITLE, f"src/kept{n}.py")
        self.secret = await factories.create_repository("hushco", "vaultrepo")
        self.secret_scan, occurrence = await _finding(self.secret, author, TITLE, "src/secret_redirect.py")
        lone_scan = self.secret_scan
        canonical = await factories.create_canonical(
            self.secret, LONE_TITLE, file_path="src/secret_console.py", commit_sha=lone_scan.commit_sha
        )
        lone_occurrence = await factories.create_occurrence(lone_scan, canonical, position=1)
        # what a report takedown hides (the repository itself stays public when only a report is taken down)
        self.report_marks = ("secret_redirect", "secret_console", occurrence, str(lone_occurrence.public_id))
        self.secret_marks = self.report_marks
        async with db.transaction() as session:
            await session.execute(
                text("INSERT INTO infestation_dirty_keys (pattern_key, reason) VALUES (:a, 'test'), (:b, 'test')"),
                {"a": KEY, "b": LONE_KEY},
            )
        await drain_all()


SURFACES = (
    "/infestations.json",
    "/infestations",
    "/infestations.json?status=open",
    f"/infestations/{KEY}.json",
    f"/infestations/{KEY}",
    f"/infestations/{KEY}/instances.json",
    "/repos/github.com/keeper0/kept0.json",
    "/index.json",
    "/",
    "/fragments/home-infestations",
    "/infestations.atom",
    f"/infestations/{KEY}.atom",
    "/sitemap.xml",
    "/search.json?q=vault",
)


async def quarantine(world: World) -> None:
    r = world.secret
    await change_repository_listing(world.moderator, r.host, r.owner, r.name, "quarantined", REASON, NOTES)


async def unlist(world: World) -> None:
    r = world.secret
    await change_repository_listing(world.moderator, r.host, r.owner, r.name, "pending", REASON, NOTES)


async def restrict(world: World) -> None:
    await change_scan_visibility(world.moderator, world.secret_scan.id, "restricted", REASON, NOTES)


async def summarize(world: World) -> None:
    await change_scan_visibility(world.moderator, world.secret_scan.id, "public_summary", REASON, NOTES)


async def hard_delete(world: World) -> None:
    r = world.secret
    await delete_repository(r.host, r.owner, r.name, actor_id=world.moderator.id, reason=REASON, notes=NOTES)


WHOLE_REPOSITORY = (quarantine, unlist, hard_delete)  # the whole repository leaves every listed surface


@pytest.mark.parametrize("takedown", [quarantine, unlist, restrict, summarize, hard_delete], ids=lambda f: f.__name__)
async def test_a_takedown_holds_at_the_next_request_on_every_surface_then_counts_follow_the_drain(
    client: httpx.AsyncClient, takedown: Callable[[World], Awaitable[None]]
) -> None:
    world = World()
    await world.build()
    before = await bodies(client, SURFACES)  # also warms every in-process cache (home fragment, sitemap boundaries)
    assert any(mark in body for body in before.values() for mark in world.secret_marks)  # the marks are real
    assert (await client.get(f"/infestations/{LONE_KEY}.json")).status_code == 200

    await takedown(world)
    if takedown in WHOLE_REPOSITORY:
        world.secret_marks = (*world.report_marks, "hushco", "vaultrepo", world.secret_scan.commit_sha)

    after = await bodies(client, SURFACES)  # the very next requests, no worker has run
    for path, body in after.items():
        for mark in world.secret_marks:
            assert mark not in body, (takedown.__name__, path, mark)
    # a pattern whose every visible row is gone answers 404 before its refresh
    assert (await client.get(f"/infestations/{LONE_KEY}.json")).status_code == 404
    assert (await client.get(f"/infestations/{LONE_KEY}.atom")).status_code == 404
    # the shared pattern keeps its title; its counts may lag until the refresh, and say when they were computed
    show = (await client.get(f"/infestations/{KEY}.json")).json()
    assert show["infestation"]["title"] == TITLE and show["refreshed_at"] is not None
    assert [e["owner"] for e in show["repositories"]["entries"]] == ["keeper1", "keeper0"]

    assert await drain_all() >= 1
    infestation = await get_infestation(KEY)
    assert infestation is not None
    assert (infestation["repo_count"], infestation["instance_count"]) == (2, 2)
    assert await get_infestation(LONE_KEY) is None
    for path, body in (await bodies(client, SURFACES)).items():
        for mark in world.secret_marks:
            assert mark not in body, (takedown.__name__, "after the drain", path, mark)


async def _twins(client: httpx.AsyncClient) -> dict[str, object]:
    paths = [
        *(f"/infestations.json?days={d}&status={s}" for d in (7, 30, 365) for s in ("all", "open")),
        f"/infestations/{KEY}.json",
        f"/infestations/{KEY}/instances.json",
        f"/infestations/{LONE_KEY}.json",
        "/repos/github.com/keeper0/kept0.json",
        "/repos/github.com/hushco/vaultrepo.json",
        "/index.json",
    ]
    answers: dict[str, object] = {}
    for path in paths:
        response = await client.get(path)
        assert response.status_code == 200, path
        body = response.json()
        if isinstance(body, dict):
            body.pop("refreshed_at", None)  # when computed: differs by design between the two paths
            for item in body.get("items", []):
                item.pop("first_seen_at")  # window-scoped on the legacy path, all-time on the rollups (§5.7)
        answers[path] = body
    return answers


async def test_with_the_flag_off_and_the_rollups_wiped_every_atlas_twin_equals_the_recomputation(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = World()
    await world.build()
    from_rollups = await _twins(client)
    pages = {p: (await client.get(p)).status_code for p in ("/infestations", f"/infestations/{KEY}", "/")}
    async with db.transaction() as session:
        for table in ("infestation_pattern_instances", "infestation_pattern_repos", "infestation_patterns"):
            await session.execute(text(f"DELETE FROM {table}"))
    monkeypatch.setenv("INFESTATIONS_READ_FROM_ROLLUP", "false")
    assert await _twins(client) == from_rollups
    assert {p: (await client.get(p)).status_code for p in pages} == pages
    feed = (await client.get(f"/infestations/{KEY}.atom")).text
    assert "kept0" in feed and "vaultrepo" in feed  # the legacy path serves the ledger from source


async def test_a_ban_reaches_the_atlas_statuses_by_the_next_drain() -> None:
    """An account takedown reveals nothing, so it may wait for the refresh; but by the next drain the statuses its
    checks supported are gone from the atlas (authority revalidation marks the keys, docs/domain.md §5.6)."""
    world = World()
    await world.build()
    reviewers = [await factories.create_account(trust_tier="reviewer", state="active") for _ in range(2)]
    async with db.read_session(replica=False) as session:
        public_id, commit = (
            await session.execute(
                # its finding of KEY (a table's rows come in no set order without ORDER BY)
                text(
                    "SELECT public_id, last_seen_commit_sha FROM canonical_findings"
                    " WHERE repository_id = :r AND pattern_key = :k ORDER BY id"
                ),
                {"r": world.secret.id, "k": KEY},
            )
        ).first()  # type: ignore[misc]
    body = {"commit_sha": commit, "verdict": "confirmed", "provenance": "human", "notes": "Confirmed by hand here."}
    for n, reviewer in enumerate(reviewers):
        await record_check(reviewer, str(public_id), body, client_ip=f"198.51.100.{n + 1}")
    await drain_all()
    infestation = await get_infestation(KEY)
    assert infestation is not None and infestation["verified_count"] == 1

    await change_account(world.moderator, reviewers[0].handle, state="banned", reason=REASON, notes=NOTES)
    await drain_all()
    infestation = await get_infestation(KEY)
    assert infestation is not None and (infestation["verified_count"], infestation["open_count"]) == (0, 3)
