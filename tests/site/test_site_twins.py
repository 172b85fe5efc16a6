"""Every HTML page announces the JSON of exactly that page (`rel=alternate`: cursor, filters and query included),
paged pages announce the next page (`rel=next`), and walking a paged surface either way — the HTML pages' `rel=next`
or the twins' `next_cursor` from the announced alternate — sees every row exactly once (docs/domain.md §6.1)."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit

import httpx

from e2e.seed import seed_pattern
from e2e.soup import attr, one, soup

LINK_ALTERNATE = re.compile(r'<([^>]+)>; rel="alternate"; type="application/json"')


def alternate(response: httpx.Response) -> str:
    """The twin a page announces, in its Link header and its <head> alike."""
    match = LINK_ALTERNATE.search(response.headers["Link"])
    assert match is not None, response.headers["Link"]
    assert attr(one(soup(response), 'link[rel=alternate][type="application/json"]'), "href") == match.group(1)
    return match.group(1)


def with_cursor(url: str, key: str, cursor: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query)) | {key: cursor}
    return f"{parts.path}?{urlencode(query)}"


def ledger_rows(response: httpx.Response) -> list[str]:
    return [attr(tr, "data-instance") for tr in soup(response).select("#ledger-rows tr")]


def next_page(response: httpx.Response) -> str | None:
    found = soup(response).select_one("link[rel=next]")
    return attr(found, "href") if found is not None else None


async def test_ledger_walks_both_ways_see_every_instance_once(client: httpx.AsyncClient) -> None:
    seeded = await seed_pattern("Walked ledger pattern", repos=3, instances=130)
    # through the HTML pages' rel=next; each page's twin holds exactly the rows that page shows
    html_seen: list[str] = []
    url: str | None = f"/infestations/{seeded.key}"
    pages = 0
    while url is not None:
        response = await client.get(url)
        assert response.status_code == 200, url
        rows = ledger_rows(response)
        twin = (await client.get(alternate(response))).json()
        assert [str(e["id"]) for e in twin["instances"]["entries"]] == rows, url
        html_seen += rows
        url, pages = next_page(response), pages + 1
    assert pages == 3 and len(html_seen) == 130 and len(set(html_seen)) == 130

    # through the twins' next_cursor, from the alternate the first page announced
    twin_seen: list[str] = []
    twin_url: str | None = alternate(await client.get(f"/infestations/{seeded.key}"))
    while twin_url is not None:
        body = (await client.get(twin_url)).json()["instances"]
        twin_seen += [str(e["id"]) for e in body["entries"]]
        twin_url = with_cursor(twin_url, "cursor", body["next_cursor"]) if body["next_cursor"] else None
    assert twin_seen == html_seen


async def test_the_no_js_ledger_page_announces_its_own_cursor_twin(client: httpx.AsyncClient) -> None:
    seeded = await seed_pattern("Ledger page twin pattern", repos=2, instances=120)
    first = (await client.get(f"/infestations/{seeded.key}.json")).json()["instances"]
    cursor = first["next_cursor"]
    page = await client.get(f"/infestations/{seeded.key}/instances", params={"cursor": cursor})
    twin_url = alternate(page)
    assert twin_url == f"/infestations/{seeded.key}/instances.json?{urlencode({'cursor': cursor})}"
    twin = (await client.get(twin_url)).json()
    assert [str(e["id"]) for e in twin["entries"]] == ledger_rows(page)
    assert not set(ledger_rows(page)) & {str(e["id"]) for e in first["entries"]}
    assert next_page(page) == f"/infestations/{seeded.key}?{urlencode({'cursor': twin['next_cursor']})}"
    seen = [str(e["id"]) for e in first["entries"]]  # the instances twin walks on by its own next_cursor
    twin_next: str | None = twin_url
    while twin_next is not None:
        body = (await client.get(twin_next)).json()
        seen += [str(e["id"]) for e in body["entries"]]
        twin_next = with_cursor(twin_next, "cursor", body["next_cursor"]) if body["next_cursor"] else None
    assert len(seen) == 120 and len(set(seen)) == 120


async def test_the_repositories_of_a_pattern_walk_once_through_the_twin(client: httpx.AsyncClient) -> None:
    seeded = await seed_pattern("Many repositories pattern", repos=70)
    twin_url: str | None = alternate(await client.get(f"/infestations/{seeded.key}"))
    seen: list[int] = []
    while twin_url is not None:
        body = (await client.get(twin_url)).json()["repositories"]
        seen += [e["repository_id"] for e in body["entries"]]
        twin_url = with_cursor(twin_url, "repos_cursor", body["next_cursor"]) if body["next_cursor"] else None
    assert len(seen) == 70 and set(seen) == {r.id for r in seeded.repositories}


async def test_every_page_announces_the_json_of_exactly_that_page(client: httpx.AsyncClient) -> None:
    seeded = await seed_pattern("Announced twin pattern", repos=3, instances=4)
    repo = seeded.repositories[0]
    index = await client.get("/infestations", params={"days": "14", "min_repos": "3", "limit": "7"})
    index_twin = (await client.get(alternate(index))).json()
    assert index_twin["filters"] | {"counts_window_days": None} == {
        "days": 14,
        "min_repos": 3,
        "status": "all",
        "limit": 7,
        "counts_window_days": None,
    }
    assert [i["pattern_key"] for i in index_twin["items"]] == [seeded.key]
    search = await client.get("/search", params={"q": "svc-001", "limit": "5"})
    search_twin = (await client.get(alternate(search))).json()
    assert search_twin["query"] == "svc-001" and [i["name"] for i in search_twin["items"]] == ["svc-001"]
    repository = await client.get(f"/repos/{repo.host}/{repo.owner}/{repo.name}")
    assert (await client.get(alternate(repository))).json()["repository"]["name"] == repo.name
    finding = await client.get(f"/findings/{seeded.occurrence_ids[0]}")
    assert (await client.get(alternate(finding))).json()["finding"]["public_id"] == seeded.occurrence_ids[0]
    home = await client.get("/")
    assert alternate(home) == "/index.json"
