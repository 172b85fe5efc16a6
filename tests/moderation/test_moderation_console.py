"""The moderation console through HTTP: lists with filters and keyset cursors, the three forms without
JavaScript (303 + message) and with htmx (fragment), invalid input re-rendered with the errors and what was typed,
and the audit log."""

from __future__ import annotations

import re

import httpx
import pytest
from bs4 import BeautifulSoup
from sqlalchemy import text

from app.accounts.models import Account
from app.kernel import db
from tests import factories
from tests.moderation.support import HTMX, NOTES, SAME_ORIGIN, act_as, make_account, two_repository_pattern


@pytest.fixture
async def moderator(client: httpx.AsyncClient) -> Account:
    account = await make_account("mod", platform_role="moderator")
    await act_as(client, account)
    return account


def soup(response: httpx.Response) -> BeautifulSoup:
    return BeautifulSoup(response.text, "lxml")


async def test_reports_filter_by_repository_and_visibility(
    client: httpx.AsyncClient, moderator: Account, submitter: Account
) -> None:
    repos, scans = await two_repository_pattern(submitter)
    hidden = await factories.create_scan(repos[0], submitter, visibility="restricted")
    slug = f"{repos[0].host}/{repos[0].owner}/{repos[0].name}"

    everything = soup(await client.get("/moderation"))
    ids = {s.id for s in scans} | {hidden.id}
    assert {f"scan-{i}" for i in ids} <= {f["id"] for f in everything.select("form.moderation-form")}

    one_repo = soup(await client.get("/moderation", params={"repository": slug.upper()}))
    assert {f["id"] for f in one_repo.select("form.moderation-form")} == {f"scan-{scans[0].id}", f"scan-{hidden.id}"}
    restricted = soup(await client.get("/moderation", params={"repository": slug, "visibility": "restricted"}))
    assert [f["id"] for f in restricted.select("form.moderation-form")] == [f"scan-{hidden.id}"]

    bad = await client.get("/moderation", params={"visibility": "private"})
    assert bad.status_code == 400 and "visibility: must be one of" in bad.text
    bad_repo = await client.get("/moderation", params={"repository": "nonsense"})
    assert bad_repo.status_code == 400 and "HOST/OWNER/NAME" in bad_repo.text
    bad_cursor = await client.get("/moderation", params={"cursor": "not-a-cursor"})
    assert bad_cursor.status_code == 400


async def test_report_list_pages_with_a_keyset_cursor(
    client: httpx.AsyncClient, moderator: Account, submitter: Account
) -> None:
    repo = await factories.create_repository()
    created = [await factories.create_scan(repo, submitter) for _ in range(53)]
    first = soup(await client.get("/moderation"))
    first_ids = [f["id"] for f in first.select("form.moderation-form")]
    assert len(first_ids) == 50
    older = first.select_one('a[rel="next"]')
    assert older is not None
    second = soup(await client.get(str(older["href"])))
    second_ids = [f["id"] for f in second.select("form.moderation-form")]
    assert len(second_ids) == 3 and second.select_one('a[rel="next"]') is None
    assert set(first_ids).isdisjoint(second_ids)
    assert {f"scan-{s.id}" for s in created} == set(first_ids) | set(second_ids)


async def test_restricting_without_javascript_redirects_back_with_the_recorded_message(
    client: httpx.AsyncClient, moderator: Account, submitter: Account
) -> None:
    _repos, scans = await two_repository_pattern(submitter)
    response = await client.post(
        f"/moderation/scans/{scans[0].id}/visibility",
        data={
            "visibility": "restricted",
            "reason": "takedown",
            "notes": NOTES,
            "return_to": "/moderation?visibility=public",
        },
        headers=SAME_ORIGIN,
    )
    assert response.status_code == 303
    location = response.headers["location"]
    assert re.fullmatch(r"/moderation\?visibility=public&recorded=\d+", location)
    page = await client.get(location)
    flash = soup(page).select_one(".flash")
    assert flash is not None
    message = flash.get_text()
    assert f"scan {scans[0].id}: visibility public → restricted" in message
    assert re.search(r"\d+ keys? pending, oldest \d+s; the atlas updates within seconds", message)


async def test_offsite_return_to_is_ignored(client: httpx.AsyncClient, moderator: Account, submitter: Account) -> None:
    _repos, scans = await two_repository_pattern(submitter)
    response = await client.post(
        f"/moderation/scans/{scans[0].id}/visibility",
        data={"visibility": "restricted", "reason": "takedown", "notes": NOTES, "return_to": "//evil.example/x"},
        headers=SAME_ORIGIN,
    )
    assert response.headers["location"].startswith("/moderation?recorded=")


async def test_invalid_input_re_renders_the_form_with_errors_and_what_was_typed(
    client: httpx.AsyncClient, moderator: Account, submitter: Account
) -> None:
    _repos, scans = await two_repository_pattern(submitter)
    typed = "short <b>note</b>"
    response = await client.post(
        f"/moderation/scans/{scans[0].id}/visibility",
        data={"visibility": "restricted", "reason": "x", "notes": typed},
        headers=SAME_ORIGIN,
    )
    assert response.status_code == 422
    page = soup(response)
    form = page.select_one(f"form#scan-{scans[0].id}")
    assert form is not None
    assert form.select_one("textarea[name=notes]").get_text() == typed  # type: ignore[union-attr]
    assert "<b>note</b>" not in response.text  # escaped, not rendered
    reason_error = page.select_one(f"#scan-{scans[0].id}-reason-error")
    notes_error = page.select_one(f"#scan-{scans[0].id}-notes-error")
    assert reason_error is not None and "reason must be 3 to 100 characters" in reason_error.get_text()
    assert notes_error is not None and "notes must be 20 to 4000 characters" in notes_error.get_text()
    selected = form.select_one("select[name=visibility] option[selected]")
    assert selected is not None and selected["value"] == "restricted"
    async with db.read_session(replica=False) as session:
        assert (await session.execute(text("SELECT count(*) FROM audit_events"))).scalar_one() == 0
        visibility = await session.execute(text("SELECT visibility FROM scans WHERE id = :id"), {"id": scans[0].id})
        assert visibility.scalar_one() == "public"


async def test_htmx_gets_the_updated_fragment_and_its_errors(
    client: httpx.AsyncClient, moderator: Account, submitter: Account
) -> None:
    _repos, scans = await two_repository_pattern(submitter)
    path = f"/moderation/scans/{scans[0].id}/visibility"
    invalid = await client.post(path, data={"visibility": "restricted", "reason": "ok!", "notes": ""}, headers=HTMX)
    assert invalid.status_code == 422
    assert "<html" not in invalid.text and "notes must be 20 to 4000" in invalid.text

    done = await client.post(
        path, data={"visibility": "public_summary", "reason": "redact", "notes": NOTES}, headers=HTMX
    )
    assert done.status_code == 200
    assert "<html" not in done.text
    fragment = soup(done)
    legend = fragment.select_one("legend")
    assert legend is not None and "now public_summary" in legend.get_text()
    flash = fragment.select_one(".flash")
    assert flash is not None and "visibility public → public_summary" in flash.get_text()
    assert fragment.select_one("textarea[name=notes]").get_text() == ""  # type: ignore[union-attr]

    again = await client.post(
        path, data={"visibility": "public_summary", "reason": "redact", "notes": NOTES}, headers=HTMX
    )
    assert again.status_code == 422 and "visibility is already public_summary" in again.text


async def test_repository_listing_form_and_filter(
    client: httpx.AsyncClient, moderator: Account, submitter: Account
) -> None:
    repos, _scans = await two_repository_pattern(submitter)
    host, owner, name = repos[1].host, repos[1].owner, repos[1].name
    response = await client.post(
        f"/moderation/repos/{host}/{owner}/{name}/listing",
        data={"listing_status": "quarantined", "reason": "malware", "notes": NOTES},
        headers=SAME_ORIGIN,
    )
    assert response.status_code == 303
    assert response.headers["location"].startswith("/moderation/repositories?recorded=")
    quarantined = soup(await client.get("/moderation/repositories", params={"listing_status": "quarantined"}))
    assert [f["id"] for f in quarantined.select("form.moderation-form")] == [f"repo-{repos[1].id}"]
    missing = await client.post(
        "/moderation/repos/github.com/nobody/nothing/listing",
        data={"listing_status": "quarantined", "reason": "malware", "notes": NOTES},
        headers=SAME_ORIGIN,
    )
    assert missing.status_code == 404


async def test_account_form_and_audit_log(client: httpx.AsyncClient, moderator: Account) -> None:
    target = await make_account("spammer")
    response = await client.post(
        f"/moderation/accounts/{target.handle}",
        data={"platform_role": "member", "state": "suspended", "reason": "spam", "notes": NOTES},
        headers=SAME_ORIGIN,
    )
    assert response.status_code == 303
    forbidden = await client.post(
        f"/moderation/accounts/{target.handle}",
        data={"platform_role": "admin", "state": "suspended", "reason": "promote", "notes": NOTES},
        headers=SAME_ORIGIN,
    )
    assert forbidden.status_code == 403 and "only admins may change platform roles" in forbidden.text

    audit = soup(await client.get("/moderation/audit"))
    [row] = audit.select("table tbody tr")
    cells = [td.get_text(" ", strip=True) for td in row.select("td")]
    assert cells[1] == "@mod"
    assert cells[2] == "account.change account spammer"
    assert cells[3] == "state: active → suspended"
    assert (cells[4], cells[5]) == ("spam", NOTES)
    accounts = soup(await client.get("/moderation/accounts", params={"state": "suspended"}))
    assert [f["id"] for f in accounts.select("form.moderation-form")] == [
        f"account-{target.id}",
        f"account-statements-{target.id}",  # hide all of the handle's statements
        f"account-signal-{target.id}",  # pin its gate (tests/trust/test_pin.py)
    ]


async def test_audit_log_pages_with_a_cursor(client: httpx.AsyncClient, moderator: Account) -> None:
    async with db.transaction() as session:
        await session.execute(
            text(
                """INSERT INTO audit_events (actor_id, action, subject_type, subject_id, before, after, reason, notes)
                   SELECT :actor, 'scan.visibility', 'scan', g::text, '{"visibility": "public"}',
                          '{"visibility": "restricted"}', 'takedown', :notes
                   FROM generate_series(1, 60) g"""
            ),
            {"actor": moderator.id, "notes": NOTES},
        )
    first = soup(await client.get("/moderation/audit"))
    assert len(first.select("table tbody tr")) == 50
    older = first.select_one('a[rel="next"]')
    assert older is not None
    second = soup(await client.get(str(older["href"])))
    assert len(second.select("table tbody tr")) == 10
    seen = {tr["id"] for tr in first.select("table tbody tr")} | {tr["id"] for tr in second.select("table tbody tr")}
    assert len(seen) == 60
