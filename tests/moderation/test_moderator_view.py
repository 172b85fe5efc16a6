"""The moderator's view of the public pages (docs/domain.md §8): one audit event's page, and a marker with the time
and a link to that event on everything a privileged viewer sees that the public cannot."""

from __future__ import annotations

import httpx
from bs4 import BeautifulSoup, Tag

from app.accounts.models import Account
from app.kernel import db
from app.maintainers.models import RepositoryMaintainer
from app.maintainers.statements import StatementInput, record_statement
from tests import factories
from tests.moderation.support import NOTES, SAME_ORIGIN, act_as, make_account, two_repository_pattern
from tests.sql import scalar
from tests.statements import statements_sent


def soup(response: httpx.Response) -> BeautifulSoup:
    return BeautifulSoup(response.text, "lxml")


def facts(page: BeautifulSoup, selector: str) -> dict[str, Tag]:
    """A definition list's entries by their term."""
    terms, values = page.select(f"{selector} dt"), page.select(f"{selector} dd")
    return {dt.get_text(strip=True): dd for dt, dd in zip(terms, values, strict=True)}


def href(tag: Tag | None) -> str:
    assert tag is not None
    return str(tag["href"])


async def restrict(client: httpx.AsyncClient, scan_id: int, visibility: str = "restricted") -> int:
    """The console's no-JS form; the audit event id from its redirect."""
    response = await client.post(
        f"/moderation/scans/{scan_id}/visibility",
        data={"visibility": visibility, "reason": "takedown", "notes": NOTES},
        headers=SAME_ORIGIN,
    )
    assert response.status_code == 303, response.text
    return int(response.headers["location"].rsplit("recorded=", 1)[1])


async def test_an_audit_event_has_its_page_for_moderators_only(
    client: httpx.AsyncClient, moderator: Account, submitter: Account
) -> None:
    repos, scans = await two_repository_pattern(submitter)
    await act_as(client, moderator)
    event_id = await restrict(client, scans[0].id)

    answer = await client.get(f"/moderation/audit/{event_id}")
    assert answer.status_code == 200 and "no-store" in answer.headers["cache-control"]
    page = soup(answer)
    event = facts(page, "#audit-event")
    assert event["Who"].get_text(strip=True) == "@mod"
    assert event["Action"].get_text(strip=True) == "scan.visibility"
    assert event["Change"].get_text(strip=True) == "visibility: public → restricted"
    assert (event["Reason"].get_text(strip=True), event["Notes"].get_text(strip=True)) == ("takedown", NOTES)
    repo = repos[0]
    assert href(event["Subject"].a) == f"/repos/{repo.host}/{repo.owner}/{repo.name}#report-{scans[0].id}"
    # the log links each event's page
    log = soup(await client.get("/moderation/audit"))
    assert href(log.select_one(f"#audit-{event_id} a")) == f"/moderation/audit/{event_id}"

    assert (await client.get(f"/moderation/audit/{event_id + 1000}")).status_code == 404
    assert (await client.get("/moderation/audit/0")).status_code == 404
    for attributes in ({"platform_role": "member"}, {"trust_tier": "reviewer"}):
        await act_as(client, await make_account(f"u{len(attributes)}{next(iter(attributes.values()))}", **attributes))
        refused = await client.get(f"/moderation/audit/{event_id}")
        assert refused.status_code == 403 and NOTES not in refused.text
    await act_as(client, None)
    anonymous = await client.get(f"/moderation/audit/{event_id}")
    assert anonymous.status_code == 303 and NOTES not in anonymous.text
    assert anonymous.headers["location"] == f"/login?next=%2Fmoderation%2Faudit%2F{event_id}"


async def moderate(client: httpx.AsyncClient, path: str, **values: str) -> int:
    """One console action without JavaScript; the audit event id from its redirect."""
    response = await client.post(path, data={**values, "reason": "takedown", "notes": NOTES}, headers=SAME_ORIGIN)
    assert response.status_code == 303, response.text
    return int(response.headers["location"].rsplit("recorded=", 1)[1])


async def event_time(event_id: int) -> str:
    at = await scalar("SELECT inserted_at FROM audit_events WHERE id = :id", id=event_id)
    return f"{at:%Y-%m-%d %H:%M} UTC"


def mark(page: BeautifulSoup, mark_id: str) -> Tag:
    found = page.select_one(f"#{mark_id}")
    assert found is not None, f"no marker #{mark_id}"
    return found


async def test_moderators_see_a_marker_with_the_time_and_the_audit_event_the_public_nothing(
    client: httpx.AsyncClient, moderator: Account, submitter: Account
) -> None:
    repo = await factories.create_repository()
    restricted, _c, occurrence = await factories.create_instance(repo, submitter, "Hard-coded credential")
    summary, canonical, _o = await factories.create_instance(repo, submitter, "Debug endpoint left on")
    unaudited = await factories.create_scan(repo, submitter, visibility="restricted")  # written outside the service
    sayer = await make_account("sayer")
    async with db.transaction() as session:
        session.add(RepositoryMaintainer(repository_id=repo.id, account_id=sayer.id))
    said = await record_statement(sayer.id, str(canonical.public_id), StatementInput("affected", None, None, "Fix."))
    quarantined = await factories.create_repository()
    await factories.create_instance(quarantined, submitter, "Open redirect")
    await act_as(client, moderator)
    restrict_id = await moderate(client, f"/moderation/scans/{restricted.id}/visibility", visibility="restricted")
    summary_id = await moderate(client, f"/moderation/scans/{summary.id}/visibility", visibility="public_summary")
    hide_id = await moderate(client, f"/moderation/statements/{said.id}", visibility="hidden")
    slug = f"{quarantined.host}/{quarantined.owner}/{quarantined.name}"
    quarantine_id = await moderate(client, f"/moderation/repos/{slug}/listing", listing_status="quarantined")

    here = f"/repos/{repo.host}/{repo.owner}/{repo.name}"
    with statements_sent() as sent:
        answer = await client.get(here)
    assert answer.status_code == 200 and answer.headers["cache-control"] == "private, no-store"
    assert len([s for s in sent if "audit_events" in s]) == 1, "one query for every marker of the page"
    page = soup(answer)
    assert page.select_one("#repository-hidden-mark") is None  # listed
    for scan_id, event_id, label in ((restricted.id, restrict_id, "Restricted"), (summary.id, summary_id, "Summary")):
        marker = mark(page, f"report-{scan_id}-hidden-mark")
        assert marker.get_text(" ", strip=True).startswith(label) and await event_time(event_id) in marker.get_text()
        assert href(marker.a) == f"/moderation/audit/{event_id}"
    assert "no audit event recorded" in mark(page, f"report-{unaudited.id}-hidden-mark").get_text()
    assert mark(page, f"report-{unaudited.id}-hidden-mark").a is None

    finding = soup(await client.get(f"/findings/{occurrence.public_id}"))
    assert href(mark(finding, f"report-{restricted.id}-hidden-mark").a) == f"/moderation/audit/{restrict_id}"
    statement_page = soup(await client.get(f"/findings/{_o.public_id}"))
    assert href(mark(statement_page, f"statement-{said.id}-hidden-mark").a) == f"/moderation/audit/{hide_id}"
    held = soup(await client.get(f"/repos/{slug}"))
    marker = mark(held, "repository-hidden-mark")
    assert "Quarantined" in marker.get_text() and await event_time(quarantine_id) in marker.get_text()
    event = await client.get(href(marker.a))  # the link works: the event's own page
    assert event.status_code == 200 and "repository.listing" in event.text

    # a reviewer sees the hidden reports and their markers, not the moderators' audit links
    await act_as(client, await make_account("checker", trust_tier="reviewer"))
    reviewer = soup(await client.get(here))
    assert "Restricted" in mark(reviewer, f"report-{restricted.id}-hidden-mark").get_text()
    assert reviewer.select(".hidden-mark a") == []

    # the public: neither the hidden content nor a marker
    await act_as(client, None)
    public = await client.get(here)
    assert public.status_code == 200 and "hidden-mark" not in public.text and "audit" not in public.text
    listed = {a["id"] for a in soup(public).select("article.report")}
    assert f"report-{restricted.id}" not in listed and f"report-{unaudited.id}" not in listed
    assert f"report-{summary.id}" in listed and "Debug endpoint left on" not in public.text
    assert (await client.get(f"/findings/{occurrence.public_id}")).status_code == 404
    assert (await client.get(f"/repos/{slug}")).status_code == 404
