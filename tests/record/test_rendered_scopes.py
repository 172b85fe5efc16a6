"""Versions scoped to what a page shows (issue 39, Deliver 3; app.record.rendered.Scope): a new report moves the
pages that show reports at the next request, the atlas's pages (read from the rollup tables under the read-time
guard) only once the refresh it queued runs; a takedown still moves every page at the next request; with the rollup
read flag off the atlas reads the source tables and moves with every report again."""

from __future__ import annotations

import httpx
import pytest

from app.infestations.dirty_queue import drain_all
from app.moderation import service as moderation
from app.record import rendered
from app.registry.models import Repository
from app.reports.service import submit_report
from e2e.seed import SeededPattern, seed_pattern
from tests import factories
from tests.moderation.support import NOTES
from tests.record.support import bodies, store
from tests.reports.support import finding, report_body

pytestmark = pytest.mark.usefixtures("fresh_render_cache")


def renders() -> int:
    return store().renders


def atlas_pages(key: str) -> list[str]:
    return [
        f"/infestations/{key}",
        f"/infestations/{key}.json",
        f"/infestations/{key}/instances",
        f"/infestations/{key}.atom",
        "/infestations",
        "/infestations.json",
        "/infestations?days=365&status=open",
        "/infestations.atom",
    ]


def repository_pages(repository: Repository) -> list[str]:
    slug = f"/repos/{repository.host}/{repository.owner}/{repository.name}"
    return [f"{slug}/badge.svg", f"{slug}/reports.atom", f"{slug}/findings.sarif"]


async def report_on(repository: Repository, seeded: SeededPattern, file: str) -> int:
    """A report on `repository` with one new finding of `seeded`'s pattern (its key queued, not yet refreshed)."""
    reporter = await factories.create_account()
    body = report_body(findings=[finding(title=seeded.title, file=file)], commit_sha="b" * 40)
    report = await submit_report(reporter, repository.host, repository.owner, repository.name, body)
    return int(report["id"])


def instance_files(answer: httpx.Response) -> set[str]:
    assert answer.status_code == 200, answer.text
    return {entry["file_path"] for entry in answer.json()["instances"]["entries"]}


async def test_a_report_moves_its_repository_pages_at_once_and_the_atlas_at_its_refresh(
    client: httpx.AsyncClient,
) -> None:
    seeded = await seed_pattern("Scoped pattern", repos=2)
    reported = seeded.repositories[0]
    atlas, documents = atlas_pages(seeded.key), [*repository_pages(reported), "/", "/index.json"]
    before = await bodies(client, [*atlas, *documents])
    rendered_before = renders()

    report_id = await report_on(reported, seeded, "src/reported_later.py")

    # (d) what shows reports changes at the next request: the repository's badge, feed and SARIF, the home page
    after = await bodies(client, documents)
    assert all(after[path] != before[path] for path in documents), [p for p in documents if after[p] == before[p]]
    assert f"Report {report_id} on" in after[documents[1]]
    assert "src/reported_later.py" in after[documents[2]]
    assert renders() == rendered_before + len(documents)
    # (a) the atlas's pages are served from memory: the report wrote no rollup row yet
    assert await bodies(client, atlas) == {path: before[path] for path in atlas}
    assert renders() == rendered_before + len(documents)

    # (b) the refresh the report queued moves them, at the next request
    await drain_all()
    refreshed = await bodies(client, atlas)
    assert renders() == rendered_before + len(documents) + len(atlas)
    assert "src/reported_later.py" in refreshed[f"/infestations/{seeded.key}"]
    assert "src/reported_later.py" in instance_files(await client.get(f"/infestations/{seeded.key}.json"))
    assert renders() == rendered_before + len(documents) + len(atlas)  # the twin was kept


async def test_a_takedown_moves_the_atlas_pages_at_the_next_request_without_a_refresh(
    client: httpx.AsyncClient,
) -> None:
    """(c) The takedown fence is in every scope: no drain runs, and the quarantined repository is gone from the
    kept atlas pages at the next request (the read-time guard hides its rows until the refresh)."""
    seeded = await seed_pattern("Scoped takedown", repos=3)
    quarantined = seeded.repositories[0]
    show, twin = f"/infestations/{seeded.key}", f"/infestations/{seeded.key}.json"
    pages = await bodies(client, [show, twin, f"/infestations/{seeded.key}.atom"])
    assert all(quarantined.name in body for body in pages.values())
    rendered_before = renders()
    assert await bodies(client, list(pages)) == pages and renders() == rendered_before  # kept

    moderator = await factories.create_account(platform_role="moderator", state="active")
    await moderation.change_repository_listing(
        moderator, quarantined.host, quarantined.owner, quarantined.name, "quarantined", "takedown", NOTES
    )
    after = await bodies(client, list(pages))
    assert renders() == rendered_before + len(pages)
    assert not any(quarantined.name in body for body in after.values())
    assert {entry["repository_id"] for entry in (await client.get(twin)).json()["instances"]["entries"]} == {
        r.id for r in seeded.repositories[1:]
    }


async def test_with_the_rollup_flag_off_the_atlas_moves_with_every_report(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The legacy read path reads the source tables: its pages keep the whole version."""
    seeded = await seed_pattern("Scoped legacy pattern", repos=2)
    monkeypatch.setenv("INFESTATIONS_READ_FROM_ROLLUP", "false")
    twin = f"/infestations/{seeded.key}.json"
    assert "src/legacy_later.py" not in instance_files(await client.get(twin))
    assert (await client.get(twin)).status_code == 200
    rendered_before = renders()
    await report_on(seeded.repositories[1], seeded, "src/legacy_later.py")
    assert "src/legacy_later.py" in instance_files(await client.get(twin))  # no drain: read live
    assert renders() == rendered_before + 1


def test_every_scope_holds_the_takedown_fence() -> None:
    version = (7, 100, 200, "refreshed", 3)
    for scope in (rendered.EVERYTHING, rendered.ATLAS, rendered.STATIC):
        for rollup in (True, False):
            assert scope.of(version, rollup)[0] == 7
    assert rendered.ATLAS.of(version, True) == (7, "refreshed")
    assert rendered.ATLAS.of(version, False) == version  # the legacy path reads the source tables
