"""Keyboard paths (WCAG 2.2 AA 2.1.1, 2.4.7): the filter form, "Load more" and the login form are reached with Tab
in reading order, show a visible focus indicator, and work with the keyboard alone. (Named to sort after the async
test_moderation_flow.py: see e2e/conftest.py.)"""

from __future__ import annotations

from playwright.sync_api import Page, expect

from e2e.seed import run_async, seed_pattern

FOCUSED = "(() => { const el = document.activeElement; return el ? (el.id || el.textContent.trim()) : null; })()"
OUTLINE = "getComputedStyle(document.activeElement).outlineStyle"


def tab_until(page: Page, target: str, limit: int = 40) -> list[str]:
    """Tab from the top of the page until `target` (an id or a text) has focus; the focus stops on the way."""
    stops: list[str] = []
    for _ in range(limit):
        page.keyboard.press("Tab")
        stops.append(page.evaluate(FOCUSED))
        if stops[-1] == target:
            return stops
    raise AssertionError(f"{target!r} never took focus: {stops}")


def test_filters_load_more_and_login_work_from_the_keyboard(page: Page, live_server: str) -> None:
    # (no console-error check here: the refused login's 401 is logged by the browser, as it should be)
    seeded = run_async(lambda: seed_pattern("Keyboard walked pattern", repos=3, instances=60))
    page.goto(f"{live_server}/infestations")
    stops = tab_until(page, "f-days")
    assert stops[0] == "Skip to content"
    assert page.evaluate(OUTLINE) != "none"
    page.keyboard.press("Tab")
    assert page.evaluate(FOCUSED) == "f-min"
    page.keyboard.press("Tab")
    assert page.evaluate(FOCUSED) == "f-status"
    page.keyboard.press("Tab")
    assert page.evaluate(FOCUSED) == "Apply"
    page.keyboard.press("Enter")
    expect(page.locator(f"#atlas-hub-{seeded.key}")).to_have_count(1)

    page.goto(f"{live_server}/infestations/{seeded.key}")
    rows = page.locator("#ledger-rows tr")
    expect(rows).to_have_count(50)
    page.locator("#load-more").focus()
    assert page.evaluate(OUTLINE) != "none"
    page.keyboard.press("Enter")
    expect(rows).to_have_count(60)

    page.goto(f"{live_server}/login")
    tab_until(page, "login-email")
    page.keyboard.type("nobody@example.com")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.getAttribute('name')") == "password"
    page.keyboard.type("wrong password entirely")
    page.keyboard.press("Enter")
    expect(page.locator(".form-error[role=alert]")).to_be_visible()
