"""What the public sees of coordinated disclosure (docs/domain.md "Coordinated disclosure"): while a finding is
embargoed, only a stub (severity, reported date, deadline) on its repository's page and twin and in the ledger, and
nothing of it on any other surface; once the clock publishes, the whole finding everywhere, with its `disclosure`
object saying how it ended."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from app.devservices import Standby
from app.kernel import db
from app.reports.embargo import publish_embargoed
from app.reports.finding_memory import pattern_key
from tests import factories
from tests.conftest import caught_up
from tests.disclosure.support import clock_ends, embargoed_report, moderator_extends
from tests.kernel.test_replica import _on_standby
from tests.kernel.test_replica import real_replica as real_replica  # the fixture
from tests.site.test_openapi import _conforms
from tests.surfaces import every_public_body, export_into, public_surfaces
from tests.system.test_varnish import Stack, fetch, hit
from tests.system.test_varnish import stack as stack  # the fixtures
from tests.system.test_varnish import web as web

TITLE = "Session token written to the access log"
FILE = "src/embargoed_logging.py"
KEY = pattern_key(TITLE)
SLUG = "github.com/embco/embrepo"
STATEMENT = text(
    "INSERT INTO finding_statements (canonical_finding_id, status, action_statement)"
    " VALUES (:id, 'affected', 'Rotate the tokens; a fix is on its way.')"
)

HIDE_REPOSITORY = text("UPDATE repositories SET listing_status = 'quarantined' WHERE id = :id")
RESTRICT_REPORT = text("UPDATE scans SET visibility = 'restricted' WHERE id = :id")


@pytest.fixture
def export_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return export_into(tmp_path, monkeypatch)


async def test_an_embargoed_finding_is_a_stub_until_the_clock_publishes_it_everywhere(
    client: httpx.AsyncClient, export_dir: Path
) -> None:
    embargo = await embargoed_report("embco", "embrepo", [(FILE, TITLE)])
    [occurrence], [canonical] = embargo.occurrences, embargo.canonical_public_ids
    async with db.transaction() as session:  # its maintainers may state on it: nothing public until publication
        await session.execute(STATEMENT, {"id": embargo.canonicals[0]})
    surfaces = (
        *public_surfaces(SLUG, KEY, "embrepo"),
        f"/repos/{SLUG}/vex.json",
        "/infestations",
        f"/infestations/{KEY}",
        "/disclosures",
        "/disclosures.json",
    )

    during = await every_public_body(client, surfaces)
    for mark in (TITLE, FILE, occurrence, canonical, KEY):
        assert mark not in during, mark
    for path in (f"/findings/{occurrence}", f"/findings/{occurrence}.json", f"/findings/{canonical}.json"):
        assert (await client.get(path)).status_code == 404, path
    assert (await client.get(f"/repos/{SLUG}/vex.json")).status_code == 404  # only published findings are stated
    twin = (await client.get(f"/repos/{SLUG}.json")).json()
    assert not any(r.get("findings") for r in twin["reports"])
    [stub] = twin["disclosures"]["items"]
    assert twin["disclosures"]["embargoed"] == 1
    assert set(stub) == {"severity", "reported_at", "deadline", "extensions"}
    assert (stub["severity"], stub["extensions"]) == ("high", [])
    page = (await client.get(f"/repos/{SLUG}")).text
    assert "1 finding under coordinated disclosure" in page and "No finding of this report is public yet" in page
    assert stub["deadline"][:10] in page and stub["reported_at"][:10] in page
    assert f"/repos/{SLUG}/maintain" in page and "no verified maintainer" in page  # the invitation to claim it
    ledger = (await client.get("/disclosures.json", params={"repository": SLUG})).json()
    assert ledger == {
        "items": [
            {
                "repository": SLUG,
                "severity": "high",
                "reported_at": stub["reported_at"],
                "deadline": stub["deadline"],
                "state": "embargoed",
                "extensions": [],
                "published_at": None,
                "published_because": None,
            }
        ],
        "next_cursor": None,
    }

    assert await clock_ends(embargo.canonicals) == embargo.canonicals

    after = await every_public_body(client, surfaces)
    for mark in (TITLE, FILE, occurrence, KEY):
        assert mark in after, mark
    answered = await client.get(f"/findings/{occurrence}.json")
    _conforms((await client.get("/api/v1/openapi.json")).json(), "/findings/{ref}.json", "get", answered)
    record = answered.json()
    disclosure = record["disclosure"]
    assert (disclosure["state"], disclosure["published_because"]) == ("published", "deadline")
    assert disclosure["deadline"] == stub["deadline"] and disclosure["published_at"] is not None
    assert TITLE in (await client.get(f"/findings/{occurrence}")).text
    sarif = (await client.get(f"/repos/{SLUG}/findings.sarif")).json()
    [result] = sarif["runs"][0]["results"]
    assert result["properties"]["disclosure"] == disclosure
    [line] = [
        json.loads(row)
        for row in gzip.decompress((await client.get("/exports/findings.ndjson.gz")).content).decode().splitlines()
        if occurrence in row
    ]
    assert line["disclosure"] == disclosure
    assert TITLE in (await client.get(f"/repos/{SLUG}/vex.json")).text
    twin = (await client.get(f"/repos/{SLUG}.json")).json()
    assert twin["disclosures"] == {"embargoed": 0, "items": []}
    assert "under coordinated disclosure" not in (await client.get(f"/repos/{SLUG}")).text
    [ended] = (await client.get("/disclosures.json")).json()["items"]
    assert (ended["state"], ended["published_because"]) == ("published", "deadline")


async def test_a_finding_without_a_clock_says_immediate(client: httpx.AsyncClient) -> None:
    repository = await factories.create_repository("nowco", "nowrepo")
    author = await factories.create_account(state="active")
    from app.reports.service import submit_report
    from tests.reports.support import finding, report_body

    report = await submit_report(author, "github.com", "nowco", "nowrepo", report_body([finding(title="Now")]))
    [f] = report["findings"]
    record = (await client.get(f"/findings/{f['public_id']}.json")).json()
    assert record["disclosure"]["state"] == "immediate"
    assert record["disclosure"]["published_because"] == "immediate"
    twin = (await client.get("/repos/github.com/nowco/nowrepo.json")).json()
    assert twin["disclosures"] == {"embargoed": 0, "items": []} and repository.id


async def test_the_ledger_pages_open_clocks_by_deadline_then_publications_and_filters_by_repository(
    client: httpx.AsyncClient,
) -> None:
    alpha = await embargoed_report("ledco", "alpha", [("a/one.py", "Alpha one"), ("a/two.py", "Alpha two")])
    beta = await embargoed_report("ledco", "beta", [("b/one.py", "Beta one")], days=60)
    gamma = await embargoed_report("ledco", "gamma", [("c/one.py", "Gamma one")])
    await moderator_extends(alpha.canonical_public_ids[1], 40, "Two downstream releases vendor the parser.")
    await clock_ends(gamma.canonicals, "moderator")
    # neither a quarantined repository's clock nor a restricted report's is known to the public
    hidden = await embargoed_report("ledco", "quarantined", [("d/one.py", "Delta one")])
    restricted = await embargoed_report("ledco", "restricted", [("e/one.py", "Epsilon one")])
    async with db.transaction() as session:
        await session.execute(HIDE_REPOSITORY, {"id": hidden.repository.id})
        await session.execute(RESTRICT_REPORT, {"id": restricted.scan_id})
    assert not (await client.get("/repos/github.com/ledco/restricted.json")).json()["disclosures"]["items"]

    walked, cursor, pages = [], None, 0
    while True:
        answer = await client.get("/disclosures.json", params={"limit": 1, **({"cursor": cursor} if cursor else {})})
        assert answer.status_code == 200, answer.text
        walked += answer.json()["items"]
        cursor, pages = answer.json()["next_cursor"], pages + 1
        if cursor is None:
            break
    assert pages == 4
    assert [(i["repository"], i["state"]) for i in walked] == [
        ("github.com/ledco/alpha", "embargoed"),  # 30 days
        ("github.com/ledco/beta", "embargoed"),  # 60 days
        ("github.com/ledco/alpha", "embargoed"),  # 30 days and the moderator's 40
        ("github.com/ledco/gamma", "published"),
    ]
    assert walked[3]["published_because"] == "moderator"
    assert [(e["by"], e["days"]) for e in walked[2]["extensions"]] == [("moderator", 40)]
    assert (await client.get("/disclosures.json")).json()["items"] == walked
    document = (await client.get("/api/v1/openapi.json")).json()
    for path, url in (
        ("/disclosures.json", "/disclosures.json"),
        ("/disclosures.json", "/disclosures.json?limit=0"),
        ("/repos/{host}/{owner}/{name}.json", "/repos/github.com/ledco/alpha.json"),
    ):
        _conforms(document, path, "get", await client.get(url))  # the document says the answers, stub and 422 alike

    only_beta = (await client.get("/disclosures.json", params={"repository": "GitHub.com/LedCo/Beta"})).json()
    assert [i["repository"] for i in only_beta["items"]] == ["github.com/ledco/beta"] and beta.canonicals
    for params, field in (
        ({"repository": "ledco/beta"}, "repository"),
        ({"cursor": "x" * 12}, "cursor"),
        ({"limit": "0"}, "limit"),
    ):
        refused = await client.get("/disclosures.json", params=params)
        assert refused.status_code == 422 and field in refused.json()["errors"], (params, refused.text)

    first = await client.get("/disclosures", params={"limit": 2})
    assert first.status_code == 200 and "github.com/ledco/beta" in first.text
    [next_url] = re.findall(r'href="(/disclosures\?[^"]*cursor=[^"]+)" rel="next"', first.text)
    second = await client.get(next_url.replace("&amp;", "&"))
    assert second.status_code == 200 and "a moderator published it" in second.text
    assert "Two downstream releases vendor the parser." in second.text
    stub = (await client.get("/repos/github.com/ledco/alpha")).text
    assert "2 findings under coordinated disclosure" in stub and "40 days by a moderator" in stub
    for title in ("Alpha one", "Alpha two", "Beta one"):
        assert title not in first.text + second.text + stub


# ---- after publication, from a lagging standby and through the shared cache ---------------------------------------


async def test_a_lagging_standby_shows_the_stub_until_it_replays_the_publication(
    client: httpx.AsyncClient, real_replica: Standby
) -> None:
    embargo = await embargoed_report("lagco", "lagrepo", [(FILE, TITLE)])
    [occurrence] = embargo.occurrences
    caught_up(real_replica)
    _on_standby(real_replica, "SELECT pg_wal_replay_pause()")
    await clock_ends(embargo.canonicals)  # on the primary; the standby does not replay it

    # public reads go to the standby: the whole old state (the stub), never a half-published finding
    assert (await client.get(f"/findings/{occurrence}.json")).status_code == 404
    twin = (await client.get("/repos/github.com/lagco/lagrepo.json")).json()
    assert twin["disclosures"]["embargoed"] == 1 and TITLE not in json.dumps(twin)

    _on_standby(real_replica, "SELECT pg_wal_replay_resume()")
    caught_up(real_replica)
    record = (await client.get(f"/findings/{occurrence}.json")).json()
    assert record["finding"]["title"] == TITLE and record["disclosure"]["state"] == "published"
    twin = (await client.get("/repos/github.com/lagco/lagrepo.json")).json()
    assert twin["disclosures"]["embargoed"] == 0 and TITLE in json.dumps(twin)


async def test_through_the_shared_cache_the_clock_publication_is_fresh_at_the_next_request_with_the_worker_stopped(
    stack: Stack, web: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    embargo = await embargoed_report("edgeco", "edgerepo", [(FILE, TITLE)])
    pages = ("/repos/github.com/edgeco/edgerepo", "/repos/github.com/edgeco/edgerepo.json", "/disclosures.json")
    for path in pages:
        await fetch(web, path)
        cached = await fetch(web, path)
        assert hit(cached) and TITLE not in cached.text, path

    monkeypatch.setenv("VARNISH_PURGE_URLS", stack.varnish.purge_url)
    async with db.transaction() as session:  # the clock's publication, and no drain after it (the worker stopped)
        await publish_embargoed(session, embargo.canonicals, "deadline")

    for path in pages:
        fresh = await fetch(web, path)
        assert not hit(fresh), (path, "still the embargoed copy")
    assert TITLE in (await fetch(web, pages[0])).text and TITLE in (await fetch(web, pages[1])).text
    assert (await fetch(web, pages[2])).json()["items"][0]["published_because"] == "deadline"
    assert TITLE in (await fetch(web, f"/findings/{embargo.occurrences[0]}")).text
