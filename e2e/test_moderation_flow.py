"""A moderator in Chromium, against a real `tarakan serve` process: log in, restrict a report of a two-repository
pattern, see it leave the atlas after a drain and the action in the audit log, log out, find the console closed."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from app.infestations.dirty_queue import drain_all
from app.kernel import db
from app.record.outbox import mark_dirty
from app.reports.finding_memory import pattern_key
from tests.moderation.support import NOTES, PASSWORD, TITLE, make_account, two_repository_pattern

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture
async def chromium_browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, chromium_sandbox=False)
        try:
            yield browser
        finally:
            await browser.close()


@pytest.fixture
async def moderator_page(chromium_browser: Browser) -> AsyncIterator[Page]:
    context = await chromium_browser.new_context()
    try:
        yield await context.new_page()
    finally:
        await context.close()


async def atlas_links(browser: Browser, base: str, key: str) -> int:
    """Links to the pattern on /infestations as a new anonymous visitor sees it (a fresh context: public pages
    may be cached by the browser for up to 30 s)."""
    context = await browser.new_context()
    try:
        visitor = await context.new_page()
        await visitor.goto(f"{base}/infestations")
        await expect(visitor.locator("h1").first).to_be_visible()
        return await visitor.locator(f'a[href="/infestations/{key}"]').count()
    finally:
        await context.close()


async def test_a_moderator_restricts_a_report_and_the_pattern_leaves_the_atlas(
    chromium_browser: Browser, moderator_page: Page, live_server: str
) -> None:
    browser, page = chromium_browser, moderator_page
    await make_account("mod", platform_role="moderator", password=PASSWORD)
    submitter = await make_account("agent")
    repos, scans = await two_repository_pattern(submitter)
    key = pattern_key(TITLE)
    async with db.transaction() as session:  # the fixtures bypass the write path: dirty the key as a submit would
        await mark_dirty(session, [key], "assimilate")
    await drain_all()
    assert await atlas_links(browser, live_server, key) > 0

    # the console sends an anonymous visitor to the login page and back
    await page.goto(f"{live_server}/moderation")
    assert "/login?next=" in page.url
    await page.fill("input[name=email]", "mod@example.com")
    await page.fill("input[name=password]", PASSWORD)
    await page.click("form[action='/login'] button[type=submit]")
    await expect(page.locator("h1")).to_have_text("Moderation")

    slug = f"{repos[0].host}/{repos[0].owner}/{repos[0].name}"
    await page.fill("#f-repository", slug)
    await page.click("form.filters button[type=submit]")
    form = page.locator(f"#scan-{scans[0].id}")
    await page.click(f"text=Moderate #{scans[0].id}")
    await form.locator("select[name=visibility]").select_option("restricted")
    await form.locator("input[name=reason]").fill("takedown")
    await form.locator("textarea[name=notes]").fill(NOTES)
    await form.locator("button[type=submit]").click()
    # with htmx the form is swapped in place, without it the page reloads: both show the recorded message
    flash = page.locator(".flash")
    await expect(flash.first).to_contain_text("visibility public → restricted")
    await expect(flash.first).to_contain_text("the atlas")

    await drain_all()
    assert await atlas_links(browser, live_server, key) == 0

    await page.goto(f"{live_server}/moderation/audit")
    row = page.locator("table tbody tr").first
    await expect(row).to_contain_text("@mod")
    await expect(row).to_contain_text(f"scan.visibility scan {scans[0].id}")
    await expect(row).to_contain_text("visibility: public → restricted")
    await expect(row).to_contain_text("takedown")

    await page.click("form.logout button[type=submit]")
    await page.wait_for_url(f"{live_server}/")
    response = await page.goto(f"{live_server}/moderation")
    assert response is not None
    assert "/login?next=%2Fmoderation" in page.url
    await expect(page.locator("input[name=password]")).to_be_visible()
