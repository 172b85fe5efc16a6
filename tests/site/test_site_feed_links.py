"""Pages announce their Atom feeds, and the announced feeds answer."""

from __future__ import annotations

import httpx
from bs4 import BeautifulSoup

from app.infestations.dirty_queue import drain_all
from app.kernel import db
from app.record.outbox import mark_dirty
from tests.factories import create_account, create_instance, create_repository


async def _atom_links(client: httpx.AsyncClient, path: str) -> list[str]:
    page = await client.get(path)
    assert page.status_code == 200, path
    soup = BeautifulSoup(page.text, "lxml")
    return [str(link["href"]) for link in soup.find_all("link", attrs={"type": "application/atom+xml"})]


async def test_index_show_and_repository_pages_link_their_feeds(client: httpx.AsyncClient) -> None:
    account = await create_account()
    repos = [await create_repository("acme", f"svc{i}") for i in range(2)]
    keys = []
    for repo in repos:
        _, canonical, _ = await create_instance(repo, account, "Open redirect after login")
        keys.append(canonical.pattern_key)
    async with db.transaction() as session:
        await mark_dirty(session, keys, "test")
    await drain_all()

    links = {
        "/infestations": await _atom_links(client, "/infestations"),
        f"/infestations/{keys[0]}": await _atom_links(client, f"/infestations/{keys[0]}"),
        "/repos/github.com/acme/svc0": await _atom_links(client, "/repos/github.com/acme/svc0"),
    }
    assert links == {
        "/infestations": ["/infestations.atom"],
        f"/infestations/{keys[0]}": [f"/infestations/{keys[0]}.atom"],
        "/repos/github.com/acme/svc0": ["/repos/github.com/acme/svc0/reports.atom"],
    }
    for hrefs in links.values():
        feed = await client.get(hrefs[0])
        assert feed.status_code == 200 and feed.headers["content-type"].startswith("application/atom+xml")
