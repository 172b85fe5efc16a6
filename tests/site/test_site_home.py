"""Home page: stats, the top-12 constellation as a shared versioned fragment (ETag/304), recent reports."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import text as sqltext

from app.accounts.models import Account
from app.infestations.dirty_queue import drain_all
from app.kernel import db
from app.kernel.audit import record_audit
from app.record import outbox, rendered
from app.registry.service import register_repository
from app.reports.service import submit_report
from app.site import home_infestations
from e2e.seed import seed_pattern
from e2e.soup import attr, attrs, maybe, one, soup, text
from tests import factories
from tests.conftest import truncate_all


@pytest.fixture(autouse=True)
def fresh_fragment_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # every test starts from empty tables; the in-process version cache must not outlive them
    monkeypatch.setenv("REGISTRY_STATS_TTL", "0")
    home_infestations.clear()
    yield
    home_infestations.clear()


async def moderator() -> Account:
    # moderators are exempt from submission rate limits, so a test can submit several reports quickly
    return await factories.create_account(platform_role="moderator", state="active")


async def submit(account: Account, owner: str, name: str, titles: list[str], sha: str) -> dict[str, Any]:
    await register_repository("github.com", owner, name)
    body = {
        "commit_sha": sha,
        "model": "gpt-test",
        "prompt_version": "v1",
        "document": {
            "tarakan_scan_format": 1,
            "findings": [
                {"file": f"src/f{i}.py", "severity": "high", "title": t, "description": "Details.", "line_start": 3}
                for i, t in enumerate(titles)
            ],
        },
    }
    return await submit_report(account, "github.com", owner, name, body)


async def test_home_shows_stats_atlas_and_reports(client: httpx.AsyncClient) -> None:
    reporter = await moderator()
    await submit(reporter, "alpha", "web", ["Open redirect in login"], "a" * 40)
    await submit(reporter, "beta", "api", ["Open redirect in login", "Debug endpoint exposed"], "b" * 40)
    await register_repository("github.com", "gamma", "idle")
    await drain_all()

    response = await client.get("/")
    assert response.status_code == 200
    assert response.headers["Link"] == '</index.json>; rel="alternate"; type="application/json"'
    page = soup(response)
    assert text(page, "#stat-repositories") == "3"
    assert text(page, "#stat-unscanned") == "1"
    assert text(page, "#stat-open") == "3"
    assert text(page, "#stat-contributors") == "1"
    # the top-12 constellation and its table: only the title seen in 2+ repositories
    stars = one(page, "#home-map svg").select("a")
    assert [attr(a, "aria-label").split(":")[0] for a in stars] == ["#1 Open redirect in login"]
    assert [a.get_text() for a in page.select("#home-atlas td.cell-title a")] == ["Open redirect in login"]
    fragment = one(page, "#home-infestations")
    assert attr(fragment, "hx-get") == "/fragments/home-infestations"
    assert attr(fragment, "hx-trigger") == "every 15s"
    assert attr(fragment, "data-etag").startswith('"home-infestations-')
    # recent reports, newest first
    assert attrs(page, "#recent-reports a", "href") == ["/repos/github.com/beta/api", "/repos/github.com/alpha/web"]
    assert "2 findings" in text(page, "#recent-reports li:first-child")
    assert attr(one(page, "form.search"), "action") == "/search"


async def test_home_empty_registry(client: httpx.AsyncClient) -> None:
    page = soup(await client.get("/"))
    assert text(page, "#stat-repositories") == "0"
    assert maybe(page, "#home-atlas-empty") is not None
    assert "Multi-repo patterns appear when the same issue title hits 2+ listed repos." in page.get_text()


async def test_recent_reports_respect_visibility_and_listing(client: httpx.AsyncClient) -> None:
    submitter = await factories.create_account()
    listed = await factories.create_repository("vis", "listed")
    hidden = await factories.create_repository("vis", "hidden", listing_status="quarantined")
    pending = await factories.create_repository("vis", "pending", listing_status="pending")
    await factories.create_scan(listed, submitter, visibility="public", commit_sha="1" * 40)
    await factories.create_scan(listed, submitter, visibility="public_summary", commit_sha="2" * 40)
    await factories.create_scan(listed, submitter, visibility="restricted", commit_sha="3" * 40)
    await factories.create_scan(hidden, submitter, visibility="public", commit_sha="4" * 40)
    await factories.create_scan(pending, submitter, visibility="public", commit_sha="5" * 40)

    page = soup(await client.get("/"))
    items = page.select("#recent-reports li")
    commits = [li.get_text(" ", strip=True) for li in items]
    assert len(items) == 2
    assert any("commit 1111111" in c and "0 findings" in c for c in commits)
    summary = next(c for c in commits if "commit 2222222" in c)
    assert "summary only" in summary and "finding" not in summary
    body = (await client.get("/index.json")).json()
    assert {r["commit_sha"][:7]: r["findings_count"] for r in body["recent_reports"]} == {
        "1111111": 0,
        "2222222": None,
    }


async def test_fragment_etag_and_304_before_any_list_query(client: httpx.AsyncClient) -> None:
    await seed_pattern("Shared pattern", repos=2)
    first = await client.get("/fragments/home-infestations")
    assert first.status_code == 200
    etag = first.headers["ETag"]
    assert etag.startswith('"') and not etag.startswith("W/")  # strong
    assert first.headers["Vary"] == "HX-Request"
    assert first.headers["Cache-Control"] == "public, max-age=0, s-maxage=300"  # browsers revalidate each poll
    assert first.headers["xkey"].split()[0] == "atlas"
    assert "Shared pattern" in first.text
    # the poll carries the version it shows, so an unchanged atlas is a 304 and no swap
    assert json.loads(attr(one(soup(first), "#home-infestations"), "hx-headers")) == {"If-None-Match": etag}

    before = home_infestations.stats()
    for _ in range(25):
        again = await client.get("/fragments/home-infestations", headers={"If-None-Match": etag})
        assert again.status_code == 304
        assert again.content == b""
        assert again.headers["ETag"] == etag
    after = home_infestations.stats()
    # 25 open pages polling in the same interval: answered from the render cache, no list query
    assert after["renders"] == before["renders"]
    # a stale or foreign tag gets the body (from the render cache: still no new list query)
    stale = await client.get("/fragments/home-infestations", headers={"If-None-Match": '"something-else"'})
    assert stale.status_code == 200 and "Shared pattern" in stale.text
    assert home_infestations.stats()["renders"] == before["renders"]


async def test_fragment_version_changes_when_the_atlas_changes(client: httpx.AsyncClient) -> None:
    await seed_pattern("First pattern", repos=2, name_prefix="first")
    etag = (await client.get("/fragments/home-infestations")).headers["ETag"]
    assert (await client.get("/fragments/home-infestations", headers={"If-None-Match": etag})).status_code == 304
    await seed_pattern("Second pattern", repos=3, name_prefix="second")
    # the refresh moved the version (app.record.rendered): the very next poll gets the new list
    changed = await client.get("/fragments/home-infestations", headers={"If-None-Match": etag})
    assert changed.status_code == 200
    assert changed.headers["ETag"] != etag
    names = [a.get_text() for a in soup(changed).select("#home-atlas td.cell-title a")]
    assert names == ["Second pattern", "First pattern"]


async def test_home_json_twin(client: httpx.AsyncClient) -> None:
    seeded = await seed_pattern("Twin pattern", repos=2)
    body = (await client.get("/index.json")).json()
    assert set(body) == {"stats", "infestations", "recent_reports"}
    assert set(body["stats"]) == {"repositories", "unscanned", "open_findings", "verified_findings", "contributors"}
    assert [i["pattern_key"] for i in body["infestations"]] == [seeded.key]
    assert len(body["recent_reports"]) == 2
    assert all(isinstance(r["inserted_at"], str) for r in body["recent_reports"])


async def test_a_takedown_committed_by_another_process_leaves_the_fragment_at_the_next_request(
    client: httpx.AsyncClient,
) -> None:
    kept = await seed_pattern("Kept pattern", repos=2, name_prefix="kept")
    gone = await seed_pattern("Quarantined pattern", repos=2, name_prefix="gone")
    first = await client.get("/fragments/home-infestations")
    assert "Quarantined pattern" in first.text and "Kept pattern" in first.text
    etag = first.headers["ETag"]
    # what another web process or the CLI does: quarantine both repositories and audit it, in one transaction;
    # nothing in this process hears about it, and the version TTL has not run out
    async with db.transaction() as session:
        for repository in gone.repositories:
            await session.execute(
                sqltext("UPDATE repositories SET listing_status = 'quarantined' WHERE id = :id"), {"id": repository.id}
            )
            await record_audit(
                session,
                actor_id=None,
                action="repository.listing",
                subject_type="repository",
                subject_id=str(repository.id),
                before={"listing_status": "listed"},
                after={"listing_status": "quarantined"},
                reason="takedown",
                notes="test",
            )
    after = await client.get("/fragments/home-infestations", headers={"If-None-Match": etag})
    assert after.status_code == 200
    assert after.headers["ETag"] != etag
    assert "Quarantined pattern" not in after.text
    assert kept.title in after.text


async def test_a_pattern_deleted_by_a_drain_alone_changes_the_version(client: httpx.AsyncClient) -> None:
    """The version holds no count of the patterns (O(patterns) every 5 s): a refresh that only deletes a pattern
    (nothing else refreshed, nothing audited, the queue empty again as before) still moves it, through the
    change-feed entry written with the change that emptied the pattern."""
    truncate_all()  # the plan below is read on tables as fresh as TRUNCATE leaves them, not on a DELETE's statistics
    await seed_pattern("Kept pattern", repos=2, name_prefix="kept")
    gone = await seed_pattern("Emptied pattern", repos=2, name_prefix="gone")
    first = await client.get("/fragments/home-infestations")
    assert "Emptied pattern" in first.text
    async with db.transaction() as session:  # every report of the pattern hidden, without an audit event
        scans = await session.execute(
            sqltext("SELECT id FROM scans WHERE repository_id = ANY(:ids)"), {"ids": [r.id for r in gone.repositories]}
        )
        for (scan_id,) in scans.all():
            await session.execute(sqltext("UPDATE scans SET visibility = 'restricted' WHERE id = :id"), {"id": scan_id})
            await outbox.mark_scan_dirty(session, scan_id, "visibility")
    await drain_all()
    after = await client.get("/fragments/home-infestations", headers={"If-None-Match": first.headers["ETag"]})
    assert after.status_code == 200
    assert "Emptied pattern" not in after.text and "Kept pattern" in after.text
    async with db.read_session(replica=False) as session:
        plan = "\n".join(r[0] for r in await session.execute(sqltext("EXPLAIN " + rendered.VERSION_SQL.text)))
    # the audit log, the reports, the rollup table and the feed are read at one end of an index; only the tiny queue
    # is scanned (at most its first thousand rows)
    assert (
        "Index Only Scan Backward using audit_events_fence_idx" in plan
        and "Index Only Scan Backward using pk_scans" in plan
    )
    assert "Index Only Scan Backward using infestation_patterns_refreshed_at_idx" in plan
    assert "Index Only Scan Backward using changes_seq_idx" in plan
    scanned = {line.split(" on ")[1].split()[0] for line in plan.splitlines() if "Seq Scan on" in line}
    assert scanned <= {"infestation_dirty_keys"}, plan
