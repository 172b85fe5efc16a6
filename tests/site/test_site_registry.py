"""Repository, finding and search pages: what anonymous visitors may see (docs/domain.md §1.1-1.2), twins, escaping."""

from __future__ import annotations

import uuid
from datetime import timedelta

import httpx
import pytest
from sqlalchemy import event
from sqlalchemy import text as sql

from app.accounts.models import Account
from app.kernel import db
from app.kernel.db import utcnow
from app.registry.models import Repository
from app.reports import queries
from app.reports.checks import record_check
from app.reports.models import CanonicalFinding, ScanFinding
from e2e.seed import HOSTILE_NAME, HOSTILE_TITLE, occurrence_public_ids, project, seed_pattern
from e2e.soup import attr, attrs, maybe, one, soup, text
from tests import factories
from tests.reports.support import check_body, reviewer
from tests.sql import execute, rows


async def public_id(occurrence: ScanFinding) -> str:
    async with db.read_session(replica=False) as session:
        value = await session.scalar(sql("SELECT public_id FROM scan_findings WHERE id = :id"), {"id": occurrence.id})
    return str(value)


async def finding_in(
    repository: Repository, account: Account, title: str, *, visibility: str = "public"
) -> tuple[CanonicalFinding, str]:
    _scan, canonical, occurrence = await factories.create_instance(repository, account, title, visibility=visibility)
    return canonical, await public_id(occurrence)


async def test_repository_page_shows_public_record_only(client: httpx.AsyncClient) -> None:
    submitter = await factories.create_account()
    repo = await factories.create_repository("acme", "shop")
    _, public_finding = await finding_in(repo, submitter, "SQL injection in cart")
    await finding_in(repo, submitter, "Summary-only secret title", visibility="public_summary")
    await finding_in(repo, submitter, "Restricted takedown title", visibility="restricted")

    response = await client.get("/repos/github.com/acme/shop")
    assert response.status_code == 200
    assert response.headers["Link"] == '</repos/github.com/acme/shop.json>; rel="alternate"; type="application/json"'
    assert response.headers["Cache-Control"] == "public, max-age=30, s-maxage=300"
    page = soup(response)
    assert text(page, "#repository-title") == "acme/shop"
    reports = page.select("article.report")
    assert len(reports) == 2  # the restricted one is not shown at all
    assert attrs(page, "article.report td a", "href") == [f"/findings/{public_finding}"]
    assert "SQL injection in cart" in page.get_text()
    assert "summary only" in page.get_text()
    assert "Summary-only secret title" not in response.text
    assert "Restricted takedown title" not in response.text
    # a fresh report's review status in words; "quarantined" is a repository's takedown on pages
    assert all(text(r, ".report__head .meta").startswith("awaiting independent checks") for r in reports)
    assert "quarantined" not in page.get_text()

    twin = (await client.get("/repos/github.com/acme/shop.json")).json()
    assert {r["review_status"] for r in twin["reports"]} == {"quarantined"}  # the API's value, unchanged
    assert twin["repository"]["owner"] == "acme" and twin["repository"]["url"] == "/repos/github.com/acme/shop"
    assert [r["visibility"] for r in twin["reports"]].count("restricted") == 0
    summary = next(r for r in twin["reports"] if r["visibility"] == "public_summary")
    assert "findings" not in summary and "findings_count" not in summary
    full = next(r for r in twin["reports"] if r["visibility"] == "public")
    assert [f["public_id"] for f in full["findings"]] == [public_finding]
    assert "Restricted takedown title" not in str(twin) and "Summary-only secret title" not in str(twin)


async def test_a_repository_page_reads_on_one_pooled_connection(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page's reads (the repository, its reports and their statements, its infestations, maintainers, burden
    and disclosures) share one connection of the pool: each used to check out its own, six a page."""
    monkeypatch.delenv("DATABASE_REPLICA_URL")  # the suite names the primary as its replica too
    seeded = await seed_pattern("Hardcoded JWT secret", repos=2)
    repo = seeded.repositories[0]
    checkouts: list[object] = []

    def checkout(*_: object) -> None:
        checkouts.append(None)

    pools = [db.engine().sync_engine.pool, db.autocommit_engine().sync_engine.pool]
    for pool in pools:
        event.listen(pool, "checkout", checkout)
    try:
        for path in (f"/repos/github.com/acme/{repo.name}", f"/repos/github.com/acme/{repo.name}.json"):
            checkouts.clear()
            response = await client.get(path)
            assert response.status_code == 200
            assert seeded.key in response.text  # its infestations were read
            assert len(checkouts) == 1, path
    finally:
        for pool in pools:
            event.remove(pool, "checkout", checkout)


async def test_repository_page_lists_its_infestations(client: httpx.AsyncClient) -> None:
    seeded = await seed_pattern("Hardcoded JWT secret", repos=3)
    repo = seeded.repositories[0]
    page = soup(await client.get(f"/repos/github.com/acme/{repo.name}"))
    assert attrs(page, "#repo-infestations td.cell-title a", "href") == [f"/infestations/{seeded.key}"]
    twin = (await client.get(f"/repos/github.com/acme/{repo.name}.json")).json()
    assert [i["pattern_key"] for i in twin["infestations"]] == [seeded.key]
    assert twin["infestations"][0]["repo_count"] == 3


async def test_quarantined_repository_and_unknown_paths_are_404(client: httpx.AsyncClient) -> None:
    submitter = await factories.create_account()
    repo = await factories.create_repository("bad", "actor", listing_status="quarantined")
    _, occurrence = await finding_in(repo, submitter, "Hidden by takedown")
    pending = await factories.create_repository("new", "thing", listing_status="pending")
    for url in ("/repos/github.com/bad/actor", "/repos/github.com/nobody/nothing", f"/findings/{occurrence}"):
        response = await client.get(url)
        assert response.status_code == 404, url
        assert response.headers["Cache-Control"] == "public, max-age=5"
        assert "Hidden by takedown" not in response.text
    assert (await client.get("/repos/github.com/bad/actor.json")).status_code == 404
    # pending repositories are visible to anonymous visitors (only quarantine hides the record)
    assert (await client.get(f"/repos/github.com/new/{pending.name}")).status_code == 200


async def test_finding_page(client: httpx.AsyncClient) -> None:
    seeded = await seed_pattern("Command injection in backup", repos=2)
    occurrence = seeded.occurrence_ids[0]
    response = await client.get(f"/findings/{occurrence}")
    assert response.status_code == 200
    assert response.headers["Link"] == f'</findings/{occurrence}.json>; rel="alternate"; type="application/json"'
    page = soup(response)
    assert text(page, "#finding-title") == "Command injection in backup"
    assert text(page, "#finding-severity") == "high"
    assert text(page, "#finding-location") == "src/module_000.py:1"
    assert text(page, "#finding-status") == "open"
    assert text(page, "#finding-description") == "Command injection in backup description"
    assert attr(one(page, "#finding-infestation"), "href") == f"/infestations/{seeded.key}"
    twin = (await client.get(f"/findings/{occurrence}.json")).json()
    assert twin["finding"]["public_id"] == occurrence
    assert twin["finding"]["pattern_key"] == seeded.key
    assert twin["finding"]["repository"] == {"host": "github.com", "owner": "acme", "name": "svc-000"}
    assert twin["checks"] == []


async def test_finding_hidden_unless_public_report_on_visible_repository(client: httpx.AsyncClient) -> None:
    submitter = await factories.create_account()
    repo = await factories.create_repository("vis", "repo")
    _, restricted = await finding_in(repo, submitter, "Restricted one", visibility="restricted")
    _, summary = await finding_in(repo, submitter, "Summary one", visibility="public_summary")
    _, public = await finding_in(repo, submitter, "Public one")
    assert (await client.get(f"/findings/{public}")).status_code == 200
    for ref in (restricted, summary, "not-a-uuid", str(uuid.uuid4()), public.upper(), public.replace("-", "")):
        response = await client.get(f"/findings/{ref}")
        assert response.status_code == 404, ref
        assert "Restricted one" not in response.text and "Summary one" not in response.text
        assert (await client.get(f"/findings/{ref}.json")).status_code == 404
    # a public finding on a repository later quarantined disappears too
    async with db.transaction() as session:
        await session.execute(
            sql("UPDATE repositories SET listing_status = 'quarantined' WHERE id = :id"), {"id": repo.id}
        )
    assert (await client.get(f"/findings/{public}")).status_code == 404


async def test_search_ranks_name_prefix_first_and_escapes_like(client: httpx.AsyncClient) -> None:
    await factories.create_repository("zeta", "cart-service")  # owner/name substring only
    await factories.create_repository("cart", "web")  # owner prefix
    await factories.create_repository("acme", "cart")  # name prefix
    await factories.create_repository("acme", "cartography")  # name prefix, newer
    await factories.create_repository("hidden", "cart-x", listing_status="quarantined")
    await factories.create_repository("later", "cart-y", listing_status="pending")
    await factories.create_repository("odd", "a_b")
    await factories.create_repository("odd", "axb")

    page = soup(await client.get("/search", params={"q": "  CART "}))
    slugs = [a.get_text() for a in page.select("#search-results a")]
    assert slugs[:2] == ["acme/cartography", "acme/cart"]
    assert set(slugs[2:]) == {"cart/web", "zeta/cart-service"}
    assert "hidden/cart-x" not in slugs and "later/cart-y" not in slugs

    assert [
        a.get_text() for a in soup(await client.get("/search", params={"q": "a_b"})).select("#search-results a")
    ] == ["odd/a_b"]
    percent = soup(await client.get("/search", params={"q": "%"}))
    assert maybe(percent, "#search-empty") is not None
    slash = soup(await client.get("/search", params={"q": "acme/cart"}))
    assert {a.get_text() for a in slash.select("#search-results a")} == {"acme/cart", "acme/cartography"}

    twin = await client.get("/search.json", params={"q": "cart", "limit": "1"})
    assert twin.status_code == 200
    assert [i["url"] for i in twin.json()["items"]] == ["/repos/github.com/acme/cartography"]
    empty = await client.get("/search")
    assert empty.status_code == 200 and maybe(soup(empty), "#search-results") is None


async def test_search_caps_results(client: httpx.AsyncClient) -> None:
    for i in range(55):
        await factories.create_repository("bulk", f"lib-{i:02d}")
    assert len(soup(await client.get("/search", params={"q": "lib"})).select("#search-results li")) == 20
    capped = await client.get("/search.json", params={"q": "lib", "limit": "500"})
    assert len(capped.json()["items"]) == 50
    garbage = await client.get("/search.json", params={"q": "lib", "limit": "lots"})
    assert len(garbage.json()["items"]) == 20


async def test_hostile_names_are_text_on_registry_pages(client: httpx.AsyncClient) -> None:
    submitter = await factories.create_account()
    repo = await factories.create_repository("evil", HOSTILE_NAME)
    canonical, occurrence = await finding_in(repo, submitter, HOSTILE_TITLE)
    await project([canonical.pattern_key or ""])
    for url in (
        f"/repos/github.com/evil/{HOSTILE_NAME}",
        f"/findings/{occurrence}",
        "/search?q=evil",
        "/",
    ):
        response = await client.get(url)
        assert response.status_code == 200, url
        assert "<script>alert(1)</script>" not in response.text
        assert "<svg onload" not in response.text
    page = soup(await client.get(f"/repos/github.com/evil/{HOSTILE_NAME}"))
    assert text(page, "#repository-title") == f"evil/{HOSTILE_NAME}"
    found = soup(await client.get("/search", params={"q": "evil"}))
    assert [a.get_text() for a in found.select("#search-results a")] == [f"evil/{HOSTILE_NAME}"]
    assert attrs(found, "#search-results a", "href") == [
        "/repos/github.com/evil/%22%3E%3Csvg%20onload%3Dalert%281%29%3E"
    ]
    assert await occurrence_public_ids(canonical.pattern_key or "") == [occurrence]


async def test_a_canonical_id_redirects_to_its_newest_public_occurrence(client: httpx.AsyncClient) -> None:
    submitter = await factories.create_account()
    repo = await factories.create_repository("acme", "shop")
    canonical = await factories.create_canonical(repo, "Open redirect in login")
    now = utcnow()
    older, newer, hidden = [
        await factories.create_scan(repo, submitter, visibility=v, inserted_at=now - timedelta(days=d))
        for v, d in (("public", 3), ("public", 2), ("restricted", 1))
    ]
    _, newest_public, _ = [
        await public_id(await factories.create_occurrence(s, canonical)) for s in (older, newer, hidden)
    ]
    async with db.read_session(replica=False) as session:
        canonical_id = str(
            await session.scalar(sql("SELECT public_id FROM canonical_findings WHERE id = :id"), {"id": canonical.id})
        )

    page = await client.get(f"/findings/{canonical_id}")
    assert (page.status_code, page.headers["location"]) == (303, f"/findings/{newest_public}")
    twin = await client.get(f"/findings/{canonical_id}.json")
    assert (twin.status_code, twin.headers["location"]) == (303, f"/findings/{newest_public}.json")
    assert (await client.get(f"/findings/{canonical_id}", follow_redirects=True)).status_code == 200
    # none public: 404, as for any unknown id
    await execute("UPDATE scans SET visibility = 'restricted' WHERE repository_id = :id", id=repo.id)
    assert (await client.get(f"/findings/{canonical_id}")).status_code == 404


async def test_finding_page_lists_its_checks_newest_first_up_to_the_cap(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    seeded = await seed_pattern("Path traversal in upload", repos=1)
    occurrence = seeded.occurrence_ids[0]
    twin = (await client.get(f"/findings/{occurrence}.json")).json()
    canonical, sha = twin["finding"]["canonical_public_id"], twin["finding"]["commit_sha"]
    bodies = [check_body(commit_sha=sha, verdict=verdict) for verdict in ("confirmed", "disputed", "fixed")]
    for body in bodies:
        await record_check(await reviewer(), canonical, body)
    stored = await rows(
        "SELECT k.verdict, k.provenance, k.commit_sha, k.inserted_at FROM canonical_finding_checks k"
        " JOIN canonical_findings c ON c.id = k.canonical_finding_id WHERE c.public_id = CAST(:id AS uuid)"
        " ORDER BY k.inserted_at DESC, k.id DESC",
        id=canonical,
    )
    assert len(stored) == 3
    twin = (await client.get(f"/findings/{occurrence}.json")).json()
    assert [(c["verdict"], c["provenance"], c["commit_sha"], c["inserted_at"]) for c in twin["checks"]] == [
        (s["verdict"], s["provenance"], s["commit_sha"], s["inserted_at"].isoformat()) for s in stored
    ]
    page = soup(await client.get(f"/findings/{occurrence}"))
    cells = [[td.get_text(strip=True) for td in tr.select("td")] for tr in page.select("#finding-checks tbody tr")]
    assert cells == [
        [s["verdict"], s["provenance"], s["commit_sha"][:7], f"{s['inserted_at']:%Y-%m-%d}"] for s in stored
    ]
    monkeypatch.setattr(queries, "CHECKS_PER_FINDING_MAX", 2)
    twin = (await client.get(f"/findings/{occurrence}.json")).json()
    assert [c["inserted_at"] for c in twin["checks"]] == [s["inserted_at"].isoformat() for s in stored[:2]]
