"""Sitemaps as a crawler sees them: robots.txt -> /sitemap.xml -> children, on registries generated in SQL."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from lxml import etree
from sqlalchemy import text

from app.kernel import db
from app.record import rendered
from app.registry.stats import reset_registry_stats_cache
from tests import factories
from tests.infestations.support import back_rollups_with_visible_rows

NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
N = {"s": NS}
BASE = "http://testserver"
IDENTITY = {"Accept-Encoding": "identity"}


@pytest.fixture(autouse=True)
def no_caches(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # every request sees the rows the test just wrote
    monkeypatch.setenv("REGISTRY_STATS_TTL", "0")
    monkeypatch.setenv("SITEMAP_CACHE_TTL", "0")
    monkeypatch.setenv("BASE_URL", BASE)
    reset_registry_stats_cache()
    yield


async def sql(statement: str, **params: Any) -> list[Any]:
    async with db.transaction() as session:
        result = await session.execute(text(statement), params)
        return list(result.scalars()) if "RETURNING" in statement or statement.lstrip().startswith("SELECT") else []


async def add_repositories(start: int, stop: int, *, listing: str = "listed", owner: str = "o") -> list[int]:
    ids = await sql(
        """
        INSERT INTO repositories (host, owner, name, canonical_url, listing_status, updated_at)
        SELECT 'github.com', :owner || g, 'r' || g, 'https://github.com/' || :owner || g || '/r' || g, :listing,
               timestamptz '2026-03-01 12:00:00+00' + g * interval '1 minute'
        FROM generate_series(CAST(:start AS int), CAST(:stop AS int)) g
        RETURNING id
        """,
        start=start,
        stop=stop,
        owner=owner,
        listing=listing,
    )
    # rows written past the write path (no feed entry, no report) do not move the render cache's version: start over
    rendered.reset()
    return ids


async def add_scans(repository_ids: list[int], visibility: str, account_id: int) -> list[int]:
    return await sql(
        """
        INSERT INTO scans (repository_id, submitted_by_id, commit_sha, model, prompt_version, visibility)
        SELECT rid, :account, md5(rid::text || :visibility) || '00000000', 'm', 'p/v1', :visibility
        FROM unnest(CAST(:ids AS bigint[])) rid
        RETURNING id
        """,
        ids=repository_ids,
        visibility=visibility,
        account=account_id,
    )


async def add_findings(scan_ids: list[int], per_scan: int) -> set[str]:
    ids = await sql(
        """
        INSERT INTO scan_findings (scan_id, position, file_path, severity, title, description, updated_at)
        SELECT sid, k, 'src/x.py', 'high', 'title ' || k, 'd', timestamptz '2026-04-02 23:30:00+00'
        FROM unnest(CAST(:ids AS bigint[])) sid, generate_series(1, CAST(:per AS int)) k
        RETURNING public_id
        """,
        ids=scan_ids,
        per=per_scan,
    )
    return {str(i) for i in ids}


async def add_patterns(keys: list[str], repo_count: int) -> None:
    await sql(
        """
        INSERT INTO infestation_patterns (pattern_key, title, repo_count, instance_count, refreshed_at, updated_at)
        SELECT k, 'pattern ' || k, :n, :n, now(), timestamptz '2026-05-05 05:05:05+00'
        FROM unnest(CAST(:keys AS text[])) k
        """,
        keys=keys,
        n=repo_count,
    )
    await back_rollups_with_visible_rows(reuse=True)  # the read-time guard shows only patterns with a visible row


def parse(body: bytes) -> Any:
    return etree.fromstring(body)


def locs(root: Any) -> list[str]:
    return [str(x) for x in root.xpath("//s:loc/text()", namespaces=N)]


async def get_xml(client: httpx.AsyncClient, path: str) -> Any:
    response = await client.get(path, headers=IDENTITY)
    assert response.status_code == 200, (path, response.text)
    assert response.headers["content-type"].startswith("application/xml")
    return parse(response.content)


async def test_robots_txt_names_the_sitemap_and_the_crawl_traps(client: httpx.AsyncClient) -> None:
    response = await client.get("/robots.txt")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    lines = response.text.splitlines()
    assert lines[:2] == ["User-agent: *", "Allow: /"]
    for rule in ("/moderation", "/login", "/api/", "/fragments/", "/*?cursor="):
        assert f"Disallow: {rule}" in lines
    assert lines[-1] == f"Sitemap: {BASE}/sitemap.xml"


async def test_small_registry_is_one_urlset_with_hubs_findings_repos_and_public_infestations(
    client: httpx.AsyncClient,
) -> None:
    account = await factories.create_account()
    listed = await factories.create_repository("acme", "widget")
    hidden = await factories.create_repository("evil", "corp", listing_status="quarantined")
    pending = await factories.create_repository("wait", "list", listing_status="pending")
    _, verified, shown = await factories.create_instance(listed, account, "SQL injection", status="verified")
    _, _, summary_only = await factories.create_instance(listed, account, "Leaky log", visibility="public_summary")
    _, _, restricted = await factories.create_instance(listed, account, "Secret", visibility="restricted")
    _, _, quarantined = await factories.create_instance(hidden, account, "SQL injection")
    _, _, on_pending = await factories.create_instance(pending, account, "SQL injection")
    await add_patterns(["a" * 64], repo_count=3)
    await add_patterns(["b" * 64], repo_count=1)  # a one-repository pattern is not an infestation

    root = await get_xml(client, "/sitemap.xml")
    assert root.tag == f"{{{NS}}}urlset"
    urls = locs(root)
    assert urls == [
        f"{BASE}/",
        f"{BASE}/infestations",
        f"{BASE}/disclosures",
        f"{BASE}/search",
        f"{BASE}/findings/{shown.public_id}",
        f"{BASE}/repos/github.com/acme/widget",
        f"{BASE}/infestations/{'a' * 64}",
    ]
    for excluded in (summary_only, restricted, quarantined, on_pending):
        assert f"{BASE}/findings/{excluded.public_id}" not in urls
    entry = root.xpath("//s:url[s:loc=$loc]", loc=f"{BASE}/findings/{shown.public_id}", namespaces=N)[0]
    assert entry.findtext(f"{{{NS}}}priority") == "0.85"  # verified canonical (docs/domain.md §7.4)
    [utc_date] = await sql(
        "SELECT to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') FROM scan_findings WHERE id = :id", id=shown.id
    )
    assert entry.findtext(f"{{{NS}}}lastmod") == utc_date
    assert verified.status == "verified"
    hub = root.xpath("//s:url[s:loc=$loc]", loc=f"{BASE}/", namespaces=N)[0]
    assert hub.find(f"{{{NS}}}lastmod") is None  # no honest timestamp: no lastmod


async def test_finding_priority_follows_canonical_status_and_confirmations(client: httpx.AsyncClient) -> None:
    account = await factories.create_account()
    repo = await factories.create_repository()
    _, _, plain = await factories.create_instance(repo, account, "Plain")
    _, confirmed, with_confirmations = await factories.create_instance(repo, account, "Confirmed once")
    await sql("UPDATE canonical_findings SET confirmations_count = 1 WHERE id = :id", id=confirmed.id)
    root = await get_xml(client, "/sitemap.xml")

    def priority(public_id: object) -> str:
        node = root.xpath("//s:url[s:loc=$loc]/s:priority/text()", loc=f"{BASE}/findings/{public_id}", namespaces=N)
        return str(node[0])

    assert priority(plain.public_id) == "0.65"
    assert priority(with_confirmations.public_id) == "0.75"


async def test_single_urlset_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cap is the last guard of one file (bucket counts may be stale by a minute)."""
    from app.seo.sitemap import single_urlset

    await add_repositories(1, 1_200)  # more than the first streamed page: the next one is being prefetched
    body = "".join([chunk async for chunk in single_urlset(BASE, 10)])
    urls = locs(parse(body.encode()))
    assert len(urls) == 10
    assert urls[4:] == [f"{BASE}/repos/github.com/o{g}/r{g}" for g in range(1, 7)]
    body = "".join([chunk async for chunk in single_urlset(BASE, 1_000)])
    assert len(locs(parse(body.encode()))) == 1_000  # the abandoned prefetch left no harm


async def test_cap_cuts_inside_a_findings_page_at_a_whole_url_in_id_order() -> None:
    """Postgres renders each findings page as one text: the cap still cuts after a whole `<url>`, keeps id order,
    and the escaped base URL (a parameter of that statement) stays well-formed."""
    from app.seo.sitemap import single_urlset

    account = await factories.create_account()
    [repo_id] = await add_repositories(1, 1)
    public_ids = await sql(
        """
        INSERT INTO scan_findings (scan_id, position, file_path, severity, title, description, updated_at)
        SELECT :scan, k, 'src/x.py', 'high', 'title ' || k, 'd', timestamptz '2026-04-02 23:30:00+00'
        FROM generate_series(1, 1200) k ORDER BY k
        RETURNING public_id
        """,
        scan=(await add_scans([repo_id], "public", account.id))[0],
    )  # more than the first streamed page, so the cut falls in the prefetched second one
    base = "http://x.test/a&b"
    body = "".join([chunk async for chunk in single_urlset(base, 700)])
    root = parse(body.encode())
    assert locs(root) == [f"{base}/", f"{base}/infestations", f"{base}/disclosures", f"{base}/search"] + [
        f"{base}/findings/{p}" for p in public_ids[:696]
    ]
    last = root.xpath("//s:url", namespaces=N)[-1]
    assert last.findtext(f"{{{NS}}}lastmod") == "2026-04-02"
    assert last.findtext(f"{{{NS}}}priority") == "0.65"  # not assimilated yet: no canonical


async def test_more_urls_than_one_file_holds_switch_to_the_index_early(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Below 20,000 listed repositories, a registry with more public URLs than one urlset may hold still gets an
    index, so no public page is cut off."""
    await add_repositories(1, 1_200)
    monkeypatch.setenv("SITEMAP_MAX_URLS", "1000")
    root = await get_xml(client, "/sitemap.xml")
    assert root.tag == f"{{{NS}}}sitemapindex"
    children = [loc.text for loc in root.iter(f"{{{NS}}}loc")]
    seen: list[str] = []
    for child in children:
        seen += locs(await get_xml(client, child.removeprefix(BASE)))
    repos = [u for u in seen if "/repos/" in u]
    assert sorted(repos) == sorted(f"{BASE}/repos/github.com/o{g}/r{g}" for g in range(1, 1_201))
    monkeypatch.setenv("SITEMAP_MAX_URLS", "50000")
    rendered.reset()  # a setting is no part of the version: a deploy starts a new process
    assert (await get_xml(client, "/sitemap.xml")).tag == f"{{{NS}}}urlset"


async def test_threshold_switches_to_a_sitemap_index_at_20000_listed(client: httpx.AsyncClient) -> None:
    await add_repositories(1, 19_999)
    await add_repositories(30_000, 30_099, listing="quarantined")
    await add_repositories(40_000, 40_099, listing="pending")
    below = await get_xml(client, "/sitemap.xml")
    assert below.tag == f"{{{NS}}}urlset"
    assert len(locs(below)) == 4 + 19_999

    await add_repositories(20_000, 20_000)
    response = await client.get("/sitemap.xml", headers=IDENTITY)
    index = parse(response.content)
    assert index.tag == f"{{{NS}}}sitemapindex"
    assert locs(index) == [
        f"{BASE}/sitemap/hubs.xml",
        f"{BASE}/sitemap/repos/1.xml",
        f"{BASE}/sitemap/repos/2.xml",
    ]
    # the newest repository of each page dates it; the index is dated by its newest child
    lastmods = index.xpath("//s:sitemap/s:lastmod/text()", namespaces=N)
    assert lastmods == ["2026-03-08", "2026-03-15"]
    assert response.headers["last-modified"] == "Sun, 15 Mar 2026 09:20:00 GMT"
    # it names no repository, only its children: a shared cache keeps it, and an atlas purge reaches it
    assert response.headers["xkey"] == "atlas" and "s-maxage" in response.headers["cache-control"]
    # a page of repositories names them: kept until a takedown, which purges every such sitemap (`sitemap`)
    assert (await client.get("/sitemap/repos/1.xml", headers=IDENTITY)).headers["xkey"] == "sitemap"


async def test_children_cover_every_public_url_exactly_once(client: httpx.AsyncClient) -> None:
    """A crawler walking robots.txt -> index -> children reaches every public URL once, and nothing else."""
    account = await factories.create_account()
    listed = await add_repositories(1, 25_000)
    quarantined = await add_repositories(1, 300, listing="quarantined", owner="q")
    pending = await add_repositories(1, 200, listing="pending", owner="p")
    public_scans = await add_scans(listed[::2], "public", account.id)
    expected_findings = await add_findings(public_scans, per_scan=2)  # 25,000: three pages
    excluded = await add_findings(await add_scans(listed[1::5], "restricted", account.id), per_scan=1)
    excluded |= await add_findings(await add_scans(listed[1::7], "public_summary", account.id), per_scan=1)
    excluded |= await add_findings(await add_scans(quarantined, "public", account.id), per_scan=1)
    excluded |= await add_findings(await add_scans(pending, "public", account.id), per_scan=1)
    public_keys = [f"{i:064x}" for i in range(1, 12_001)]  # two pages
    await add_patterns(public_keys, repo_count=2)
    await add_patterns([f"{i:064x}" for i in range(20_001, 20_050)], repo_count=1)

    robots = (await client.get("/robots.txt")).text
    index_url = robots.rsplit("Sitemap: ", 1)[1].strip()
    index = await get_xml(client, index_url.removeprefix(BASE))
    assert index.tag == f"{{{NS}}}sitemapindex"
    children = locs(index)
    assert children == [
        f"{BASE}/sitemap/hubs.xml",
        *[f"{BASE}/sitemap/repos/{n}.xml" for n in (1, 2, 3)],
        *[f"{BASE}/sitemap/findings/{n}.xml" for n in (1, 2, 3)],
        *[f"{BASE}/sitemap/infestations/{n}.xml" for n in (1, 2)],
    ]
    seen: list[str] = []
    for child in children:
        root = await get_xml(client, child.removeprefix(BASE))
        assert root.tag == f"{{{NS}}}urlset"
        page = locs(root)
        assert 0 < len(page) <= 10_000
        seen.extend(page)
    assert len(seen) == len(set(seen)), "a URL appears in two children"
    expected = {f"{BASE}/", f"{BASE}/infestations", f"{BASE}/disclosures", f"{BASE}/search"}
    expected |= {f"{BASE}/repos/github.com/o{g}/r{g}" for g in range(1, 25_001)}
    expected |= {f"{BASE}/findings/{p}" for p in expected_findings}
    expected |= {f"{BASE}/infestations/{k}" for k in public_keys}
    assert set(seen) == expected
    assert not {f"{BASE}/findings/{p}" for p in excluded} & set(seen)


async def test_child_pages_out_of_range_or_malformed_are_404(client: httpx.AsyncClient) -> None:
    await add_repositories(1, 5)
    assert (await client.get("/sitemap/repos/1.xml")).status_code == 200
    for path in (
        "/sitemap/repos/2.xml",
        "/sitemap/repos/0.xml",
        "/sitemap/repos/01.xml",
        "/sitemap/repos/-1.xml",
        "/sitemap/repos/one.xml",
        "/sitemap/repos/99999999999999999999.xml",
        "/sitemap/findings/1.xml",  # no findings at all: no pages
        "/sitemap/jobs/1.xml",
    ):
        response = await client.get(path)
        assert response.status_code == 404, path
        assert response.json()["errors"]


async def test_hostile_repository_names_are_percent_encoded_and_escaped(client: httpx.AsyncClient) -> None:
    await sql(
        """
        INSERT INTO repositories (host, owner, name, canonical_url)
        VALUES ('git.example.com', 'a&b', '<x>"y''z', 'https://git.example.com/x')
        """
    )
    response = await client.get("/sitemap.xml", headers=IDENTITY)
    root = parse(response.content)  # well-formed
    assert f"{BASE}/repos/git.example.com/a%26b/%3Cx%3E%22y%27z" in locs(root)
    assert b"<x>" not in response.content


async def test_gzip_is_used_when_accepted_and_streams_are_valid(client: httpx.AsyncClient) -> None:
    await add_repositories(1, 50)
    async with client.stream("GET", "/sitemap.xml", headers={"Accept-Encoding": "gzip"}) as response:
        raw = b"".join([chunk async for chunk in response.aiter_raw()])
    assert response.headers["content-encoding"] == "gzip"
    assert "accept-encoding" in response.headers["vary"].lower()
    assert len(locs(parse(gzip.decompress(raw)))) == 54

    plain = await client.get("/sitemap.xml", headers=IDENTITY)
    assert "content-encoding" not in plain.headers
    assert len(locs(parse(plain.content))) == 54

    async with client.stream("GET", "/sitemap/hubs.xml", headers={"Accept-Encoding": "gzip;q=0"}) as refused:
        body = b"".join([chunk async for chunk in refused.aiter_raw()])
    assert "content-encoding" not in refused.headers
    assert len(locs(parse(body))) == 4


async def test_index_and_hubs_answer_304_to_a_matching_etag(client: httpx.AsyncClient) -> None:
    await add_repositories(1, 20_000)
    index_etag = ""
    for path in ("/sitemap.xml", "/sitemap/hubs.xml"):
        first = await client.get(path, headers=IDENTITY)
        etag = first.headers["etag"]
        index_etag = index_etag or etag
        again = await client.get(path, headers={**IDENTITY, "If-None-Match": etag})
        assert again.status_code == 304
        assert again.content == b""
        zipped = await client.get(path, headers={"Accept-Encoding": "gzip"})
        assert zipped.headers["etag"] != etag  # another representation, another strong ETag
    await add_repositories(20_001, 30_001)  # a third page appears: the index changes
    changed = await client.get("/sitemap.xml", headers={**IDENTITY, "If-None-Match": index_etag})
    assert changed.status_code == 200
