"""The moderator's view of the public pages (docs/domain.md §8): one audit event's page, and a marker with the time
and a link to that event on everything a privileged viewer sees that the public cannot."""

from __future__ import annotations

import httpx
import pytest
from bs4 import BeautifulSoup, Tag

from app.accounts.models import Account
from tests.moderation.support import NOTES, SAME_ORIGIN, act_as, make_account, two_repository_pattern


def soup(response: httpx.Response) -> BeautifulSoup:
    return BeautifulSoup(response.text, "lxml")


def facts(page: BeautifulSoup, selector: str) -> dict[str, Tag]:
    """A definition list's entries by their term."""
    terms, values = page.select(f"{selector} dt"), page.select(f"{selector} dd")
    return {dt.get_text(strip=True): dd for dt, dd in zip(terms, values, strict=True)}


def href(tag: Tag | None) -> str:
    assert tag is not None
    return str(tag["href"])


@pytest.fixture
async def moderator() -> Account:
    return await make_account("mod", platform_role="moderator")


@pytest.fixture
async def submitter() -> Account:
    return await make_account("agent")


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
