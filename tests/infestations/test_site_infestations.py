"""The atlas pages over real projected data: index filters and fragments, show page graph and ledger, JSON twins."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import httpx
from sqlalchemy import text

from app.kernel import db
from app.reports.finding_memory import pattern_key
from e2e.seed import HOSTILE_TITLE, account, project, seed_pattern
from e2e.soup import attr, maybe, one, soup
from tests import factories

# the infestation map (app.infestations.rows.Infestation): what names the pattern, its counts, its dates
MAP_KEYS = {
    *("pattern_key", "title", "severity", "sample_file_path", "sample_occurrence_public_id"),
    *("repo_count", "instance_count", "open_count", "verified_count", "fixed_count", "disputed_count"),
    *("last_seen_at", "first_seen_at"),
}


def iso(value: object) -> datetime:
    assert isinstance(value, str)
    return datetime.fromisoformat(value)


async def test_index_empty_state_headers_and_form(client: httpx.AsyncClient) -> None:
    response = await client.get("/infestations")
    assert response.status_code == 200
    page = soup(response)
    assert "No multi-repo patterns in this window" in page.get_text()
    assert "Patterns appear when the same finding title hits 2+ listed repos." in page.get_text(" ", strip=True)
    assert response.headers["Link"] == (
        '</infestations.json?days=30&min_repos=2&status=all>; rel="alternate"; type="application/json"'
    )
    assert response.headers["Vary"] == "HX-Request, HX-History-Restore-Request"
    assert response.headers["Cache-Control"] == "public, max-age=30, s-maxage=300"
    form = one(page, "form.filters")
    assert form is not None
    # a plain GET form (works without JS) that htmx upgrades to swap only the results
    assert attr(form, "method") == "get" and attr(form, "action") == "/infestations"
    assert (
        attr(form, "hx-get") == "/infestations"
        and attr(form, "hx-target") == "#results"
        and attr(form, "hx-push-url") == "true"
    )
    assert [attr(o, "value") for o in form.select("select[name=days] option")] == ["7", "30", "90", "365"]
    assert [attr(o, "value") for o in form.select("select[name=min_repos] option")] == ["2", "3", "5", "10"]
    assert [attr(o, "value") for o in form.select("select[name=status] option")] == [
        "all",
        "open",
        "verified",
        "fixed",
        "disputed",
    ]


async def test_index_ranks_patterns_in_table_and_constellation(client: httpx.AsyncClient) -> None:
    wide = await seed_pattern("Hardcoded secret in config", repos=4, name_prefix="wide")
    narrow = await seed_pattern("Missing CSRF token", repos=2, name_prefix="narrow")
    await seed_pattern("Only once anywhere", repos=1, name_prefix="single")

    page = soup(await client.get("/infestations"))
    rows = page.select("#atlas tbody tr")
    assert [attr(r, "id") for r in rows] == [f"atlas-hub-{wide.key}", f"atlas-hub-{narrow.key}"]
    first = rows[0].find_all("td")
    assert attr(one(first[1], "a"), "href") == f"/infestations/{wide.key}"
    assert first[3].get_text(strip=True) == "4"
    # every star is a real link with an accessible name, ranked like the table
    stars = page.select("#atlas-map svg.map--wide a")
    assert [attr(a, "href") for a in stars] == [f"/infestations/{wide.key}", f"/infestations/{narrow.key}"]
    assert attr(stars[0], "aria-label").startswith("#1 Hardcoded secret in config: 4 repositories, 4 open")
    assert one(stars[0], "title").get_text() == attr(stars[0], "aria-label")
    assert "Only once anywhere" not in page.get_text()


async def test_filters_narrow_the_atlas(client: httpx.AsyncClient) -> None:
    wide = await seed_pattern("Path traversal in upload", repos=3, name_prefix="wide")
    await seed_pattern("Open redirect", repos=2, name_prefix="narrow", status="fixed")

    page = soup(await client.get("/infestations", params={"min_repos": "3"}))
    assert [attr(r, "id") for r in page.select("#atlas tbody tr")] == [f"atlas-hub-{wide.key}"]
    assert attr(one(page, "select[name=min_repos] option[selected]"), "value") == "3"

    fixed = soup(await client.get("/infestations", params={"status": "fixed"}))
    assert [a.get_text() for a in fixed.select("#atlas tbody td.cell-title a")] == ["Open redirect"]
    assert "counting fixed instances only" in fixed.get_text()


async def test_htmx_request_gets_only_the_results_fragment(client: httpx.AsyncClient) -> None:
    seeded = await seed_pattern("Weak hash for passwords", repos=2)
    response = await client.get("/infestations", params={"days": "7"}, headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert response.headers["Vary"] == "HX-Request, HX-History-Restore-Request"
    assert "<html" not in response.text and "<form" not in response.text
    page = soup(response)
    assert maybe(page, f"#atlas-hub-{seeded.key}") is not None
    assert "within the last 7 days" in page.get_text()
    # a history restore (back button after a cache miss) must get the whole page
    restore = await client.get("/infestations", headers={"HX-Request": "true", "HX-History-Restore-Request": "true"})
    assert "<html" in restore.text


async def test_garbage_parameters_fall_back_to_defaults(client: httpx.AsyncClient) -> None:
    seeded = await seed_pattern("Race in token refresh", repos=2)
    for params in (
        {"days": "abc", "min_repos": "-4", "status": "<script>alert(1)</script>", "limit": "x"},
        {"days": "1e3", "min_repos": "1e9", "status": ""},
    ):  # not integers: the defaults (integers out of range are clamped: tests/site/test_site_filters.py)
        response = await client.get("/infestations", params=params)
        assert response.status_code == 200, params
        page = soup(response)
        assert attr(one(page, "select[name=days] option[selected]"), "value") == "30"
        assert attr(one(page, "select[name=min_repos] option[selected]"), "value") == "2"
        assert attr(one(page, "select[name=status] option[selected]"), "value") == "all"
        assert maybe(page, f"#atlas-hub-{seeded.key}") is not None
        assert "<script>alert(1)</script>" not in response.text
        twin = await client.get("/infestations.json", params=params)
        assert twin.status_code == 200 and len(twin.json()["items"]) == 1


async def test_index_json_twin_has_exactly_the_map_keys(client: httpx.AsyncClient) -> None:
    seeded = await seed_pattern("Unsafe deserialization", repos=3, instances=5)
    response = await client.get("/infestations.json")
    assert response.status_code == 200
    items = response.json()["items"]
    assert len(items) == 1
    item = items[0]
    assert set(item) == MAP_KEYS
    assert item["pattern_key"] == seeded.key
    assert (item["repo_count"], item["instance_count"], item["open_count"]) == (3, 5, 5)
    assert iso(item["last_seen_at"]).tzinfo is not None and iso(item["first_seen_at"]) <= iso(item["last_seen_at"])
    assert item["sample_occurrence_public_id"] in seeded.occurrence_ids
    # when the counts were computed sits beside the items, never inside them (docs/domain.md §5.7)
    assert iso(response.json()["refreshed_at"]) <= datetime.now(UTC)
    limited = await client.get("/infestations.json", params={"limit": "0", "min_repos": "10"})
    assert (limited.json()["items"], limited.json()["refreshed_at"]) == ([], None)


async def test_show_page_hero_graph_and_first_ledger_page(client: httpx.AsyncClient) -> None:
    seeded = await seed_pattern("Server-side request forgery", repos=3, instances=60)
    response = await client.get(f"/infestations/{seeded.key}")
    assert response.status_code == 200
    assert response.headers["Link"] == f'</infestations/{seeded.key}.json>; rel="alternate"; type="application/json"'
    page = soup(response)
    assert one(page, "h1").get_text() == "Server-side request forgery"
    assert one(page, "#infestation-repo-count").get_text() == "3"
    assert one(page, "#infestation-open-count").get_text() == "60"
    satellites = page.select("#hub-graph svg.map--wide a.satellite")
    assert sorted(attr(a, "href") for a in satellites) == sorted(
        f"/repos/github.com/acme/{r.name}" for r in seeded.repositories
    )
    assert all(attr(a, "aria-label").startswith("acme/svc-") for a in satellites)
    assert maybe(page, "#graph-more") is None  # every repository is drawn
    # the atlas's expected delay, where the newcomer looks (INFESTATIONS_HOT_KEY_INTERVAL, 30 s by default)
    refreshed = one(page, "#atlas-refreshed").get_text()
    assert refreshed.startswith("counts refreshed ") and "reaches the atlas within about 30 s" in refreshed
    rows = page.select("#ledger-rows tr")
    assert len(rows) == 50
    load_more = one(page, "#load-more")
    assert attr(load_more, "href").startswith(f"/infestations/{seeded.key}?cursor=")
    assert attr(load_more, "hx-get").startswith(f"/infestations/{seeded.key}/instances?cursor=")
    assert attr(load_more, "hx-target") == "#ledger-rows" and attr(load_more, "hx-swap") == "beforeend"


async def test_ledger_walk_without_js_and_with_htmx_shows_each_instance_once(client: httpx.AsyncClient) -> None:
    seeded = await seed_pattern("Log injection", repos=4, instances=120)

    # without JS: real links, each renders the full page with the ledger starting at the cursor
    seen: list[int] = []
    url = f"/infestations/{seeded.key}"
    while url:
        page = soup(await client.get(url))
        seen += [int(attr(tr, "data-instance")) for tr in page.select("#ledger-rows tr")]
        link = maybe(page, "#load-more")
        url = attr(link, "href").split("#")[0] if link else ""
    assert len(seen) == 120 and len(set(seen)) == 120

    # the instances route: a fragment for htmx (rows plus an out-of-band control), a full page otherwise
    first = soup(await client.get(f"/infestations/{seeded.key}"))
    next_url = attr(one(first, "#load-more"), "hx-get")
    fragment = await client.get(next_url, headers={"HX-Request": "true"})
    assert fragment.status_code == 200 and "<html" not in fragment.text
    assert fragment.headers["Vary"] == "HX-Request, HX-History-Restore-Request"
    part = soup(fragment)
    fragment_ids = [int(attr(tr, "data-instance")) for tr in part.select("tr[data-instance]")]
    assert fragment_ids == seen[50:100]
    control = one(part, "#ledger-more")
    assert attr(control, "hx-swap-oob") == "true" and maybe(control, "#load-more") is not None
    full = await client.get(next_url)
    assert "<html" in full.text
    assert [int(attr(tr, "data-instance")) for tr in soup(full).select("#ledger-rows tr")] == seen[50:100]
    # the last page ends the ledger
    last = soup(await client.get(attr(one(control, "#load-more"), "hx-get"), headers={"HX-Request": "true"}))
    assert len(last.select("tr[data-instance]")) == 20
    assert maybe(last, "#load-more") is None and maybe(last, "#ledger-end") is not None

    # newest first: instance updated_at grows with creation order in the seed
    async with db.read_session() as session:
        order = (
            await session.scalars(
                text(
                    "SELECT canonical_finding_id FROM infestation_pattern_instances WHERE pattern_key = :k "
                    "ORDER BY updated_at DESC, canonical_finding_id DESC"
                ),
                {"k": seeded.key},
            )
        ).all()
    assert seen == list(order)


async def test_graph_caps_satellites_and_says_how_many_more(client: httpx.AsyncClient) -> None:
    seeded = await seed_pattern("Prototype pollution", repos=70)
    page = soup(await client.get(f"/infestations/{seeded.key}"))
    assert len(page.select("#hub-graph svg.map--wide a.satellite")) == 64
    assert one(page, "#graph-more").get_text(strip=True) == "+6 more in ledger"
    assert "+6 more in ledger" in one(page, "#hub-graph svg text.more").get_text()
    assert len(page.select("#affected tbody tr")) == 64


async def test_show_json_twin_shape(client: httpx.AsyncClient) -> None:
    seeded = await seed_pattern("XML external entity", repos=2, instances=55)
    body = (await client.get(f"/infestations/{seeded.key}.json")).json()
    assert set(body) == {"infestation", "refreshed_at", "repositories", "instances"}
    assert iso(body["refreshed_at"]) <= datetime.now(UTC)
    assert set(body["infestation"]) == MAP_KEYS
    assert body["infestation"]["instance_count"] == 55
    assert set(body["repositories"]) == {"entries", "next_cursor"}
    assert body["repositories"]["next_cursor"] is None and len(body["repositories"]["entries"]) == 2
    assert len(body["instances"]["entries"]) == 50 and isinstance(body["instances"]["next_cursor"], str)
    entry = body["instances"]["entries"][0]
    assert entry["occurrence_public_id"] in seeded.occurrence_ids
    assert iso(entry["updated_at"]).tzinfo is not None
    rest = (
        await client.get(f"/infestations/{seeded.key}.json", params={"cursor": body["instances"]["next_cursor"]})
    ).json()
    assert len(rest["instances"]["entries"]) == 5 and rest["instances"]["next_cursor"] is None
    twin = (
        await client.get(
            f"/infestations/{seeded.key}/instances.json", params={"cursor": body["instances"]["next_cursor"]}
        )
    ).json()
    assert [e["id"] for e in twin["entries"]] == [e["id"] for e in rest["instances"]["entries"]]


async def test_unknown_malformed_keys_and_bad_cursors(client: httpx.AsyncClient) -> None:
    seeded = await seed_pattern("Insecure randomness", repos=2)
    missing = pattern_key("never reported anywhere")
    for url in (f"/infestations/{missing}", "/infestations/not-a-key", f"/infestations/{seeded.key.upper()}"):
        response = await client.get(url)
        assert response.status_code == 404, url
        assert "text/html" in response.headers["content-type"]
        assert response.headers["Cache-Control"] == "public, max-age=5"
        assert one(soup(response), "h1").get_text() == "Not found"
    assert (await client.get(f"/infestations/{missing}.json")).json() == {"errors": {"pattern_key": ["not found"]}}
    bad = await client.get(f"/infestations/{seeded.key}", params={"cursor": "garbage!"})
    assert bad.status_code == 400 and "Bad cursor" in bad.text
    bad_json = await client.get(f"/infestations/{seeded.key}.json", params={"cursor": "garbage!"})
    assert bad_json.status_code == 400 and set(bad_json.json()["errors"]) == {"cursor"}
    bad_fragment = await client.get(
        f"/infestations/{seeded.key}/instances", params={"cursor": "e30"}, headers={"HX-Request": "true"}
    )
    assert bad_fragment.status_code == 400


async def test_hostile_titles_render_as_text_in_html_and_svg(client: httpx.AsyncClient) -> None:
    submitter = await account()
    seeded = await seed_pattern(HOSTILE_TITLE, repos=2, submitter=submitter)
    hostile_repo = await factories.create_repository("evil", '"><svg onload=alert(1)>')
    await factories.create_instance(hostile_repo, submitter, HOSTILE_TITLE)
    await project([seeded.key])
    for url in ("/infestations", f"/infestations/{seeded.key}", "/"):
        response = await client.get(url)
        assert response.status_code == 200
        assert "<script>alert(1)</script>" not in response.text
        assert "<svg onload" not in response.text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in response.text
    page = soup(await client.get(f"/infestations/{seeded.key}"))
    assert one(page, "h1").get_text() == HOSTILE_TITLE
    labels = [attr(a, "aria-label") for a in page.select("#hub-graph svg.map--wide a.satellite")]
    assert 'evil/"><svg onload=alert(1)>: 1 instance, open' in labels
    hrefs = [attr(a, "href") for a in page.select("#hub-graph svg.map--wide a.satellite")]
    assert "/repos/github.com/evil/%22%3E%3Csvg%20onload%3Dalert%281%29%3E" in hrefs
    assert not page.select("svg svg, script:not([src])")
    assert re.search(r"<svg[^>]*onload", (await client.get("/infestations")).text) is None


async def test_twins_name_each_repository_by_its_opaque_id_beside_the_serial_one(client: httpx.AsyncClient) -> None:
    """`repository_uuid` is the id the change feed and the export give the repository; `repository_id` stays."""
    from app.infestations.legacy import list_instances_legacy, list_pattern_repos_legacy
    from app.record import changes

    seeded = await seed_pattern("Opaque repository ids", repos=2)
    async with db.transaction() as session:
        await changes.sync_all(session)  # the feed announces the seeded repositories, as the services do
    feed = (await client.get("/api/v1/changes?limit=1000")).json()["entries"]
    opaque = {e["repository"]: e["repository_id"] for e in feed if e["kind"] == "repository.listed"}
    serial = {f"{r.host}/{r.owner}/{r.name}": r.id for r in seeded.repositories}
    assert len(opaque) == 2

    show = (await client.get(f"/infestations/{seeded.key}.json")).json()
    ledger = (await client.get(f"/infestations/{seeded.key}/instances.json")).json()["entries"]
    legacy = (await list_instances_legacy(seeded.key))["entries"] + (await list_pattern_repos_legacy(seeded.key))[
        "entries"
    ]
    for entries in (show["instances"]["entries"], show["repositories"]["entries"], ledger, legacy):
        assert len(entries) >= 2
        for entry in entries:
            slug = f"{entry['host']}/{entry['owner']}/{entry['name']}"
            assert (entry["repository_id"], entry["repository_uuid"]) == (serial[slug], opaque[slug])
