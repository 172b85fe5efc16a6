"""Atom feeds: valid Atom 1.0, stable tag ids, escaped hostile titles, 404s for unknown or hidden records."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from lxml import etree

from app.infestations.projection import refresh_pattern
from app.kernel import db
from app.registry.models import Repository
from app.reports.finding_memory import pattern_key
from tests import factories

ATOM = "http://www.w3.org/2005/Atom"
A = {"a": ATOM}
HOSTILE = "<script>alert(1)</script> & \"quoted\" 'single'"


@pytest.fixture(autouse=True)
def base_url(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("BASE_URL", "https://tarakan.example:8443")
    monkeypatch.setenv("INFESTATIONS_READ_FROM_ROLLUP", "true")
    yield


async def fetch_feed(client: httpx.AsyncClient, path: str) -> Any:
    response = await client.get(path)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/atom+xml")
    root = etree.fromstring(response.content)
    assert_valid_atom(root)
    return root


def assert_valid_atom(root: Any) -> None:
    """The RFC 4287 rules a reader relies on: required elements, RFC 3339 times, one alternate link each."""
    assert root.tag == f"{{{ATOM}}}feed"
    for element in ("id", "title", "updated", "author"):
        assert len(root.findall(f"a:{element}", A)) == 1, element
    assert root.find("a:link[@rel='self']", A) is not None
    for entry in root.findall("a:entry", A):
        for element in ("id", "title", "updated"):
            assert len(entry.findall(f"a:{element}", A)) == 1, element
        assert len(entry.findall("a:link[@rel='alternate']", A)) == 1
    for stamp in root.xpath("//a:updated/text() | //a:published/text()", namespaces=A):
        assert stamp.endswith("Z")
        datetime.fromisoformat(stamp)


def ids(root: Any) -> list[str]:
    return [str(x) for x in root.xpath("a:entry/a:id/text()", namespaces=A)]


async def infest(title: str, repositories: list[Repository], *, days_ago: float = 1) -> str:
    account = await factories.create_account()
    when = db.utcnow() - timedelta(days=days_ago)
    for repository in repositories:
        await factories.create_instance(repository, account, title, updated_at=when, inserted_at=when)
    key = pattern_key(title)
    assert await refresh_pattern(key) == len(repositories)
    return key


async def test_atlas_feed_lists_rising_and_new_infestations_with_stable_ids(client: httpx.AsyncClient) -> None:
    repos = [await factories.create_repository() for _ in range(4)]
    rising = await infest("Rising pattern spreads", repos[:3], days_ago=1)
    old = await infest("Old pattern from last year", repos[:2], days_ago=200)
    single = await infest("Lonely pattern", repos[3:], days_ago=1)

    root = await fetch_feed(client, "/infestations.atom")
    assert root.findtext("a:id", namespaces=A) == "tag:tarakan.example,2026:feed:infestations"
    assert ids(root) == [
        f"tag:tarakan.example,2026:infestation:{rising}",  # top 7-day spread
        f"tag:tarakan.example,2026:infestation:{old}",  # newest by first sighting (rising is already listed)
    ]
    assert f"tag:tarakan.example,2026:infestation:{single}" not in ids(root)  # one repository is no infestation
    first = root.find("a:entry", A)
    assert first.findtext("a:title", namespaces=A) == "Rising pattern spreads"
    assert first.find("a:link", A).get("href") == f"https://tarakan.example:8443/infestations/{rising}"
    assert "3 repositories" in first.findtext("a:summary", namespaces=A)
    again = await fetch_feed(client, "/infestations.atom")
    assert ids(again) == ids(root)


async def test_pattern_feed_lists_new_instances_and_escapes_hostile_titles(client: httpx.AsyncClient) -> None:
    repos = [await factories.create_repository() for _ in range(3)]
    key = await infest(HOSTILE, repos)
    response = await client.get(f"/infestations/{key}.atom")
    assert b"<script>" not in response.content
    root = etree.fromstring(response.content)
    assert_valid_atom(root)
    assert HOSTILE in root.findtext("a:title", namespaces=A)
    entries = root.findall("a:entry", A)
    assert len(entries) == 3
    owners = {r.owner for r in repos}
    for entry in entries:
        title = entry.findtext("a:title", namespaces=A)
        assert title.startswith(HOSTILE)
        assert title.split(" in ")[-1].split("/")[0] in owners
        assert entry.find("a:link", A).get("href").startswith("https://tarakan.example:8443/findings/")
        assert entry.findtext("a:id", namespaces=A).startswith("tag:tarakan.example,2026:instance:")
    again = etree.fromstring((await client.get(f"/infestations/{key}.atom")).content)
    assert ids(again) == ids(root)


async def test_pattern_feed_404s_for_unknown_and_malformed_keys(client: httpx.AsyncClient) -> None:
    for key in ("f" * 64, "not-a-key", "F" * 64):
        response = await client.get(f"/infestations/{key}.atom")
        assert response.status_code == 404, key
        assert "pattern_key" in response.json()["errors"]


async def test_repository_feed_shows_visible_reports_only(client: httpx.AsyncClient) -> None:
    account = await factories.create_account(handle="reporter")
    repo = await factories.create_repository("acme", "widget")
    public = await factories.create_scan(repo, account)
    summary = await factories.create_scan(repo, account, visibility="public_summary")
    restricted = await factories.create_scan(repo, account, visibility="restricted")
    root = await fetch_feed(client, "/repos/github.com/acme/widget/reports.atom")
    entry_ids = ids(root)
    assert set(entry_ids) == {
        f"tag:tarakan.example,2026:report:{public.id}",
        f"tag:tarakan.example,2026:report:{summary.id}",
    }
    assert f"tag:tarakan.example,2026:report:{restricted.id}" not in entry_ids
    for entry in root.findall("a:entry", A):
        assert (
            entry.find("a:link", A)
            .get("href")
            .startswith("https://tarakan.example:8443/repos/github.com/acme/widget#report-")
        )
    summary_entry = root.xpath("a:entry[a:id=$id]", id=f"tag:tarakan.example,2026:report:{summary.id}", namespaces=A)[0]
    assert "summary only" in summary_entry.findtext("a:summary", namespaces=A)
    # the review status in words: a fresh report is not a takedown
    for entry in root.findall("a:entry", A):
        assert "awaiting independent checks" in entry.findtext("a:summary", namespaces=A)
        assert "quarantined" not in entry.findtext("a:summary", namespaces=A)


async def test_public_feeds_do_not_name_the_submitter(client: httpx.AsyncClient) -> None:
    account = await factories.create_account(handle="whistleblower")
    repos = [await factories.create_repository("acme", "widget"), await factories.create_repository()]
    await factories.create_scan(repos[0], account, visibility="public_summary")
    key = await infest("SQL injection in login handler", repos)  # public reports by another account
    await factories.create_instance(repos[0], account, "SQL injection in login handler")
    await refresh_pattern(key)
    for path in ("/repos/github.com/acme/widget/reports.atom", "/infestations.atom", f"/infestations/{key}.atom"):
        response = await client.get(path)
        assert "whistleblower" not in response.text, path
        root = await fetch_feed(client, path)
        assert root.findall("a:entry", A), path
        # RFC 4287 wants an author per feed or per entry: the registry itself, once, for the whole feed
        assert root.xpath("a:author/a:name/text()", namespaces=A) == ["Tarakan"], path
        assert root.findall("a:entry/a:author", A) == [], path


async def test_repository_feed_404s_for_quarantined_and_unknown(client: httpx.AsyncClient) -> None:
    account = await factories.create_account()
    hidden = await factories.create_repository("evil", "corp", listing_status="quarantined")
    await factories.create_scan(hidden, account)
    for path in ("/repos/github.com/evil/corp/reports.atom", "/repos/github.com/nobody/nothing/reports.atom"):
        response = await client.get(path)
        assert response.status_code == 404, path


async def test_control_characters_in_titles_do_not_break_the_feed(client: httpx.AsyncClient) -> None:
    repos = [await factories.create_repository() for _ in range(2)]
    key = await infest("Bell\x07 and vertical\x0btab", repos)
    root = await fetch_feed(client, f"/infestations/{key}.atom")  # parses: XML 1.0 forbids these even escaped
    assert root.findtext("a:entry/a:title", namespaces=A).startswith("Bell\ufffd and vertical\ufffdtab")
