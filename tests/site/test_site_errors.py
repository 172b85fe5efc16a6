"""Unknown addresses and wrong methods answer the site's HTML error page (or the JSON error shape for `/api/...` and
`.json` twins), and HEAD answers wherever GET does (docs/domain.md §6.1)."""

from __future__ import annotations

import httpx
import pytest

from e2e.seed import seed_pattern
from e2e.soup import one, soup, text


@pytest.mark.parametrize("path", ["/no-such-page", "/repos/github.com", "/infestations/a/b/c/d", "/static/nope.css"])
async def test_unknown_pages_get_the_site_html_404(client: httpx.AsyncClient, path: str) -> None:
    response = await client.get(path)
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("text/html")
    page = soup(response.text)
    assert text(page, "h1") == "Not found"
    assert one(page, "link[rel=stylesheet]")  # the site's layout, not the framework's plain text


@pytest.mark.parametrize("path", ["/api/v1/no-such-thing", "/no-such-page.json", "/nothing/here.json"])
async def test_unknown_api_and_twin_paths_get_the_json_404(client: httpx.AsyncClient, path: str) -> None:
    response = await client.get(path)
    assert response.status_code == 404
    assert response.json() == {"errors": {"path": ["not found"]}}


async def test_a_wrong_method_gets_the_html_405_with_allow(client: httpx.AsyncClient) -> None:
    response = await client.request("DELETE", "/infestations")
    assert response.status_code == 405
    assert response.headers["content-type"].startswith("text/html")
    assert set(response.headers["Allow"].replace(" ", "").split(",")) == {"GET", "HEAD"}
    assert text(soup(response.text), "h1") == "Method not allowed"


async def test_a_wrong_method_on_the_api_or_a_twin_gets_the_json_405(client: httpx.AsyncClient) -> None:
    api = await client.get("/api/v1/repositories")
    assert api.status_code == 405 and api.json() == {"errors": {"method": ["GET is not allowed here"]}}
    assert "POST" in api.headers["Allow"]
    twin = await client.request("PUT", "/infestations.json")
    assert twin.status_code == 405 and twin.json() == {"errors": {"method": ["PUT is not allowed here"]}}


async def test_head_answers_wherever_get_does(client: httpx.AsyncClient) -> None:
    seeded = await seed_pattern("Head request pattern", repos=2)
    for path in (
        "/",
        "/index.json",
        "/infestations",
        "/infestations.json",
        f"/infestations/{seeded.key}",
        f"/infestations/{seeded.key}.json",
        f"/infestations/{seeded.key}/instances",
        f"/repos/github.com/acme/{seeded.repositories[0].name}",
        f"/findings/{seeded.occurrence_ids[0]}",
        "/search?q=svc",
        "/login",
        "/robots.txt",
        "/sitemap.xml",
        "/infestations.atom",
        "/static/css/app.css",
        "/healthz",
    ):
        get = await client.get(path)
        head = await client.head(path)
        assert (head.status_code, get.status_code) == (200, 200), path
        assert head.headers["content-type"] == get.headers["content-type"], path
        assert head.content == b"", path
    assert (await client.head("/no-such-page")).status_code == 404


@pytest.mark.parametrize("path", ["/", "/infestations", "/search", "/login", "/no-such-page"])
async def test_every_page_footer_links_sign_in(client: httpx.AsyncClient, path: str) -> None:
    response = await client.get(path)
    assert one(soup(response.text), "footer a[href='/login']").get_text() == "sign in"
