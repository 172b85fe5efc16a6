"""The atlas pictures on a 390px phone in Chromium: the narrow picture is the one shown and its labels render at
11px or more; a satellite names its repository on hover and on keyboard focus; a wide table says it scrolls."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from e2e.seed import account, run_async, seed_pattern

RENDERED_SIZES = """svg => [...svg.querySelectorAll('text')]
  .filter(t => getComputedStyle(t).visibility === 'visible')
  .map(t => parseFloat(getComputedStyle(t).fontSize) * svg.getBoundingClientRect().width / svg.viewBox.baseVal.width)"""


def seed() -> str:
    async def make() -> str:
        submitter = await account()
        titles = ["Hardcoded credentials in deploy script", "SQL injection via order parameter"]
        titles += ["Missing CSRF protection on settings", "Open redirect after login"]
        for i, title in enumerate(titles):
            await seed_pattern(title, repos=5 - i, name_prefix=f"p{i}", submitter=submitter)
        return (await seed_pattern("Dependency confusion in build", repos=40, name_prefix="dep")).key

    return run_async(make)


def test_pictures_stay_legible_on_a_390px_phone(page: Page, live_server: str, console_errors: list[str]) -> None:
    key = seed()
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{live_server}/infestations")
    expect(page.locator("#atlas-map svg.map--wide")).to_be_hidden()
    narrow = page.locator("#atlas-map svg.map--narrow")
    expect(narrow).to_be_visible()
    sizes = narrow.evaluate(RENDERED_SIZES)
    assert sizes and min(sizes) >= 11, sizes
    assert narrow.locator("text.star-label").count() >= 1  # fewer labels, but labels
    # the ranked table is wider than the phone: it says so and the keyboard can scroll it
    wrap = page.locator("#atlas").locator("xpath=ancestor-or-self::*[contains(@class,'table-wrap')][1]")
    expect(wrap).to_have_attribute("tabindex", "0")
    cue = wrap.evaluate("w => getComputedStyle(w, '::before').content")
    assert "Scroll sideways" in cue, cue

    page.goto(f"{live_server}/infestations/{key}")
    graph = page.locator("#hub-graph svg.map--narrow")
    expect(graph).to_be_visible()
    assert min(graph.evaluate(RENDERED_SIZES)) >= 11
    label = graph.locator("a.satellite").first.locator("text.sat-label")
    expect(label).to_be_hidden()
    graph.locator("a.satellite").first.focus()
    expect(label).to_be_visible()
    assert min(graph.evaluate(RENDERED_SIZES)) >= 11  # the focused satellite's label too
    other = graph.locator("a.satellite").nth(5)
    other.locator("circle.node").hover()
    expect(other.locator("text.sat-label")).to_be_visible()


def test_satellites_name_their_repository_on_hover_and_focus_at_desktop_width(
    page: Page, live_server: str, console_errors: list[str]
) -> None:
    key = seed()
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{live_server}/infestations/{key}")
    satellites = page.locator("#hub-graph svg.map--wide a.satellite")
    expect(satellites).to_have_count(40)
    first = satellites.first
    expect(first.locator("text.sat-label")).to_be_hidden()
    page.locator("#hub-graph svg.map--wide a[href='#ledger']").focus()
    page.keyboard.press("Tab")  # the next stop after the hub is the first satellite
    expect(first.locator("text.sat-label")).to_be_visible()
    assert first.locator("text.sat-label").text_content() == (first.get_attribute("aria-label") or "").split(":")[0]
    assert (first.get_attribute("href") or "").startswith("/repos/github.com/acme/dep-")
