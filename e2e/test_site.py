"""The public site in Chromium: pages render under the CSP, the filter form works with and without JavaScript,
the ledger loads every instance exactly once, the graph caps satellites, the theme persists, hostile text stays
text, and the constellation is keyboard-reachable."""

from __future__ import annotations

import re
import time
from pathlib import Path

from playwright.sync_api import Browser, Dialog, Page, Response, expect

from app.site.home_infestations import POLL_SECONDS
from e2e.seed import HOSTILE_NAME, HOSTILE_TITLE, SeededPattern, account, project, run_async, seed_pattern
from tests import factories


def seed(title: str, **kwargs: object) -> SeededPattern:
    return run_async(lambda: seed_pattern(title, **kwargs))  # type: ignore[arg-type]


def seed_atlas() -> list[SeededPattern]:
    """Seven patterns of decreasing spread (7..2 repositories, the last one fixed everywhere)."""

    async def make() -> list[SeededPattern]:
        submitter = await account()
        titles = [
            "Hardcoded credentials in deploy script",
            "SQL injection via order parameter",
            "Missing CSRF protection on settings",
            "Path traversal in file download",
            "Verbose error pages leak stack traces",
            "Open redirect after login",
        ]
        seeded = [
            await seed_pattern(t, repos=7 - i, name_prefix=f"p{i}", submitter=submitter) for i, t in enumerate(titles)
        ]
        seeded.append(await seed_pattern("Weak TLS configuration", repos=2, name_prefix="tls", status="fixed"))
        return seeded

    return run_async(make)


def test_every_page_renders_under_the_csp(
    page: Page, live_server: str, console_errors: list[str], artifacts: Path
) -> None:
    atlas = seed_atlas()
    top = atlas[0]
    page.set_viewport_size({"width": 1280, "height": 900})
    for path, heading in (
        ("/", "THE REGISTRY OF UGLY TRUTHS"),
        ("/infestations", "INFESTATIONS"),
        (f"/infestations/{top.key}", top.title),
        (f"/repos/github.com/acme/{top.repositories[0].name}", f"acme/{top.repositories[0].name}"),
        (f"/findings/{top.occurrence_ids[0]}", top.title),
        ("/search?q=p0", "SEARCH"),
    ):
        response = page.goto(live_server + path)
        assert response is not None and response.status == 200, path
        expect(page.locator("h1")).to_have_text(heading)
        # the vendored display face and stylesheet are in use (no CDN, nothing blocked by the CSP)
        assert page.evaluate("getComputedStyle(document.querySelector('h1')).fontFamily").startswith('"Chakra Petch"')
        assert page.evaluate("document.fonts.check('700 16px \"Chakra Petch\"')")
        assert page.evaluate("typeof window.htmx") == "object"
    assert console_errors == []
    missing = page.goto(f"{live_server}/infestations/{'0' * 64}")
    assert missing is not None and missing.status == 404
    expect(page.locator("h1")).to_have_text("Not found")
    console_errors.clear()  # Chromium logs the 404 status of the page itself as a console error

    for name, path in (("home", "/"), ("index", "/infestations"), ("show", f"/infestations/{top.key}")):
        page.goto(live_server + path)
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(artifacts / f"{name}.png"), full_page=True)
    page.emulate_media(color_scheme="dark")
    page.goto(live_server + "/")
    page.screenshot(path=str(artifacts / "home-dark.png"), full_page=True)
    page.set_viewport_size({"width": 360, "height": 740})
    page.goto(f"{live_server}/infestations/{top.key}")
    assert page.evaluate("document.documentElement.scrollWidth") <= 360  # no sideways scrolling on a phone
    page.screenshot(path=str(artifacts / "show-360-dark.png"), full_page=True)


def test_filter_form_swaps_results_with_htmx(page: Page, live_server: str, console_errors: list[str]) -> None:
    atlas = seed_atlas()
    page.goto(f"{live_server}/infestations")
    rows = page.locator("#atlas tbody tr")
    expect(rows).to_have_count(7)
    page.evaluate("window.__sameDocument = true")
    page.select_option("select[name=min_repos]", "5")
    expect(rows).to_have_count(3)  # 7, 6 and 5 repositories
    expect(page).to_have_url(re.compile(r"min_repos=5"))
    assert page.evaluate("window.__sameDocument === true")  # swapped in place, not reloaded
    page.select_option("select[name=status]", "fixed")
    expect(page.locator("#atlas-empty")).to_contain_text("No multi-repo patterns in this window")
    page.select_option("select[name=min_repos]", "2")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(atlas[-1].title)
    expect(page).to_have_url(re.compile(r"status=fixed"))
    assert page.evaluate("window.__sameDocument === true")


def test_filter_form_without_javascript(browser: Browser, live_server: str) -> None:
    seed_atlas()
    context = browser.new_context(java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto(f"{live_server}/infestations")
        expect(page.locator("#atlas tbody tr")).to_have_count(7)
        expect(page.locator(".theme")).to_be_hidden()  # the theme toggle needs JS, so it is not offered
        page.select_option("select[name=min_repos]", "5")
        page.click("form.filters button[type=submit]")
        page.wait_for_url(re.compile(r"min_repos=5"))
        expect(page.locator("#atlas tbody tr")).to_have_count(3)
        expect(page.locator("select[name=min_repos] option[selected]")).to_have_attribute("value", "5")
    finally:
        context.close()


def test_load_more_shows_each_of_180_instances_once(page: Page, live_server: str, console_errors: list[str]) -> None:
    seeded = seed("Unbounded regular expression", repos=6, instances=180)
    page.goto(f"{live_server}/infestations/{seeded.key}")
    rows = page.locator("#ledger-rows tr")
    expect(rows).to_have_count(50)
    url_before = page.url
    for expected in (100, 150, 180):
        page.click("#load-more")
        expect(rows).to_have_count(expected)
    expect(page.locator("#load-more")).to_have_count(0)
    expect(page.locator("#ledger-end")).to_be_visible()
    assert page.url == url_before  # appended in place
    ids = [int(v) for v in rows.evaluate_all("rows => rows.map(r => r.dataset.instance)")]
    assert len(ids) == 180 and len(set(ids)) == 180
    # newest first: the seed gives each instance a later updated_at than the previous one (ids grow with it)
    assert ids == sorted(ids, reverse=True)


def test_load_more_without_javascript_follows_real_links(browser: Browser, live_server: str) -> None:
    seeded = seed("Unchecked redirect target", repos=3, instances=120)
    context = browser.new_context(java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto(f"{live_server}/infestations/{seeded.key}")
        seen: list[str] = []
        while True:
            seen += page.locator("#ledger-rows tr").evaluate_all("rows => rows.map(r => r.id)")
            more = page.locator("#load-more")
            if more.count() == 0:
                break
            more.click()
            page.wait_for_load_state("load")
        assert len(seen) == 120 and len(set(seen)) == 120
    finally:
        context.close()


def test_graph_shows_more_in_ledger_for_100_repositories(
    page: Page, live_server: str, console_errors: list[str]
) -> None:
    seeded = seed("Dependency confusion in build", repos=100)
    page.goto(f"{live_server}/infestations/{seeded.key}")
    expect(page.locator("#hub-graph svg.map--wide a.satellite")).to_have_count(64)
    expect(page.locator("#graph-more")).to_have_text("+36 more in ledger")
    expect(page.locator("#hub-graph svg.map--wide text.more")).to_have_text("+36 more in ledger")
    expect(page.locator("#infestation-repo-count")).to_have_text("100")


def test_theme_toggle_persists_across_reload(page: Page, live_server: str, console_errors: list[str]) -> None:
    page.emulate_media(color_scheme="light")
    page.goto(f"{live_server}/")
    html = page.locator("html")
    ground = "getComputedStyle(document.documentElement).getPropertyValue('--ground').trim()"
    assert page.evaluate(ground) == "#f4f4f4"
    page.click("[data-theme-choice=dark]")
    expect(html).to_have_attribute("data-theme", "dark")
    assert page.evaluate(ground) == "#000000"
    page.reload()
    expect(html).to_have_attribute("data-theme", "dark")
    expect(page.locator("[data-theme-choice=dark]")).to_have_attribute("aria-pressed", "true")
    assert page.evaluate("localStorage.getItem('tarakan:theme')") == "dark"
    page.goto(f"{live_server}/infestations")
    assert page.evaluate(ground) == "#000000"
    page.click("[data-theme-choice=system]")
    page.reload()
    assert page.get_attribute("html", "data-theme") is None
    assert page.evaluate(ground) == "#f4f4f4"  # system = light here
    page.click("[data-theme-choice=light]")
    page.emulate_media(color_scheme="dark")
    page.reload()
    expect(html).to_have_attribute("data-theme", "light")
    assert page.evaluate(ground) == "#f4f4f4"  # the stored choice beats the system preference


def test_hostile_titles_and_names_render_as_text(page: Page, live_server: str, console_errors: list[str]) -> None:
    async def make() -> SeededPattern:
        submitter = await account()
        seeded = await seed_pattern(HOSTILE_TITLE, repos=2, submitter=submitter)
        hostile = await factories.create_repository("evil", HOSTILE_NAME)
        await factories.create_instance(hostile, submitter, HOSTILE_TITLE)
        await project([seeded.key])
        return seeded

    seeded = run_async(make)
    dialogs: list[str] = []

    def on_dialog(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    for path in (
        "/",
        "/infestations",
        f"/infestations/{seeded.key}",
        "/search?q=evil",
        "/repos/github.com/evil/%22%3E%3Csvg%20onload%3Dalert%281%29%3E",
    ):
        page.goto(live_server + path)
        page.wait_for_load_state("networkidle")
    page.goto(f"{live_server}/infestations/{seeded.key}")
    expect(page.locator("h1")).to_have_text(HOSTILE_TITLE)
    expect(page.locator("#affected")).to_contain_text(f"evil/{HOSTILE_NAME}")
    satellite = page.locator("#hub-graph").get_by_role(
        "link", name=f"evil/{HOSTILE_NAME}: 1 instance, open", exact=True
    )
    expect(satellite).to_have_count(1)
    assert page.locator("svg svg").count() == 0 and page.locator("script:not([src])").count() == 0
    page.goto(f"{live_server}/infestations")
    expect(page.locator("#atlas-map a").first).to_have_attribute("aria-label", re.compile(re.escape(HOSTILE_TITLE)))
    assert dialogs == []


def test_keyboard_reaches_every_constellation_node(page: Page, live_server: str, console_errors: list[str]) -> None:
    atlas = seed_atlas()
    page.goto(f"{live_server}/infestations")
    stars = page.locator("#atlas-map svg.map--wide a")
    expect(stars).to_have_count(len(atlas))
    expected = set(stars.evaluate_all("links => links.map(a => a.getAttribute('href'))"))
    reached: set[str] = set()
    page.locator("body").focus()
    for _ in range(80):
        page.keyboard.press("Tab")
        href = page.evaluate(
            "(() => { const el = document.activeElement;"
            " return el && el.closest('#atlas-map') ? el.getAttribute('href') : null; })()"
        )
        if href:
            reached.add(href)
        if reached == expected:
            break
    assert reached == expected
    # the focused star is visibly marked (focus ring drawn in the signal colour)
    ring = page.evaluate("getComputedStyle(document.activeElement.querySelector('.focus-ring')).stroke")
    assert ring not in ("none", "")


def polled(response: Response) -> bool:
    return response.url.endswith("/fragments/home-infestations")


def test_home_atlas_refreshes_in_place_and_unchanged_polls_are_304(
    page: Page, live_server: str, console_errors: list[str]
) -> None:
    first = seed("Exposed admin console", repos=2, name_prefix="first")
    statuses: list[int] = []
    page.on("response", lambda r: statuses.append(r.status) if polled(r) else None)
    # the page's timers run on a clock the test moves: each poll comes after the page's own POLL_SECONDS, without
    # waiting them out in real time (the answers and the swaps are real)
    page.clock.install()
    page.goto(f"{live_server}/")
    # the server may still hold the previous test's version for a few seconds: reload until it catches up
    for _ in range(20):
        if page.locator(f'#home-map svg.map--wide a[href="/infestations/{first.key}"]').count() == 1:
            break
        page.wait_for_timeout(500)
        page.reload()
    star = page.locator(f'#home-map svg.map--wide a[href="/infestations/{first.key}"]')
    expect(star).to_have_count(1)
    page.evaluate("window.__sameDocument = true")
    # no poll before POLL_SECONDS; one poll later nothing changed: a 304, and the section is left exactly as it was
    page.clock.run_for((POLL_SECONDS - 1) * 1000)
    assert statuses == []
    with page.expect_response(polled) as unchanged:
        page.clock.run_for(1_000)
    assert unchanged.value.status == 304
    expect(star).to_have_count(1)
    second = seed("Unauthenticated metrics endpoint", repos=3, name_prefix="second")
    # the next polls pick the new version up and swap the section in place (within 40 s of real time, as before)
    top = page.locator("#home-atlas tbody tr").first
    deadline = time.monotonic() + 40
    while second.title not in (top.text_content() or "") and time.monotonic() < deadline:
        with page.expect_response(polled):
            page.clock.run_for(POLL_SECONDS * 1000)
        page.wait_for_timeout(100)  # the swap after the answer; real time for the server to catch up
    expect(top).to_contain_text(second.title)
    assert page.evaluate("window.__sameDocument === true")
    assert 200 in statuses
