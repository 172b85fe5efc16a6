"""Changing a coordinated-disclosure clock (docs/domain.md "Coordinated disclosure"): a verified maintainer extends
once, by 1-30 days with a reason, after stating affected or under_investigation, or publishes at once; a `fixed`
statement moves the deadline to 7 days later, sooner never later; the reporter publishes early only without a
repository window; a moderator publishes or extends by form. Each change audited and shown in `extensions`; each
publication public at the next request, with its feed entries then and not before."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import text

from app.accounts.models import Account
from app.accounts.service import create_token
from app.kernel import db
from app.registry.models import Repository
from app.reports.embargo import publish_embargoed
from app.reports.service import submit_report
from tests import factories
from tests.maintainers.conftest import forge  # noqa: F401 (the loopback forge a claim is verified against)
from tests.maintainers.statement_support import bearer, verified_maintainer
from tests.maintainers.support import Forge
from tests.moderation.support import HTMX, NOTES, SAME_ORIGIN, act_as
from tests.reports.support import finding, report_body
from tests.site.test_openapi import _conforms as conforms
from tests.site.test_openapi import _document as openapi

DAY = timedelta(days=1)
EXTEND_PATH = "/api/v1/findings/{canonical_public_id}/disclosure/extend"
PUBLISH_PATH = "/api/v1/findings/{canonical_public_id}/disclosure/publish"
AFFECTED = {"status": "affected", "action_statement": "Upgrade to 2.4.1 once it is released."}
WHY = "The fix needs a release of the two downstream packages."


@dataclass(frozen=True)
class Embargoed:
    repository: Repository
    reporter: Account
    canonical: str
    occurrence: str


async def embargoed(repository: Repository | None = None, *, days: int = 30, title: str = "Open redirect") -> Embargoed:
    """A report of one finding asking for `days` of coordinated disclosure (the repository's window applies too)."""
    repository = repository or await factories.create_repository()
    reporter = await factories.create_account()
    body = report_body([finding(title=title, file=f"src/{title.split()[0].lower()}.py")], disclosure={"days": days})
    answer = await submit_report(reporter, repository.host, repository.owner, repository.name, body)
    [found] = answer["findings"]
    return Embargoed(repository, reporter, str(found["canonical_public_id"]), str(found["public_id"]))


_CLOCK = text("""
SELECT d.state, d.reported_at, d.deadline, d.extensions, d.published_because
FROM disclosures d JOIN canonical_findings c ON c.id = d.canonical_finding_id WHERE c.public_id = CAST(:id AS uuid)
""")


async def clock(e: Embargoed) -> Any:
    async with db.read_session(replica=False) as session:
        return (await session.execute(_CLOCK, {"id": e.canonical})).one()


async def canonical_id(e: Embargoed) -> int:
    async with db.read_session(replica=False) as session:
        query = text("SELECT id FROM canonical_findings WHERE public_id = CAST(:id AS uuid)")
        return int((await session.execute(query, {"id": e.canonical})).scalar_one())


async def audited(action: str) -> list[Any]:
    async with db.read_session(replica=False) as session:
        query = text(
            "SELECT actor_id, subject_type, before, after, reason FROM audit_events WHERE action = :a ORDER BY id"
        )
        return list((await session.execute(query, {"a": action})).all())


async def feed(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    page = await client.get("/api/v1/changes", params={"limit": 1000})
    assert page.status_code == 200, page.text
    return list(page.json()["entries"])


def url(e: Embargoed, action: str) -> str:
    return f"/api/v1/findings/{e.canonical}/disclosure/{action}"


def near(a: datetime, b: datetime) -> bool:
    return abs(a - b) < timedelta(minutes=1)


async def test_a_maintainer_extends_once_by_up_to_30_days_after_stating(
    client: httpx.AsyncClient,
    forge: Forge,  # noqa: F811 (the fixture imported above)
) -> None:
    e = await embargoed()
    maintainer = await bearer(await verified_maintainer(forge, e.repository))
    stranger = await bearer(await factories.create_account())
    extend = {"days": 14, "reason": WHY}

    refused = await client.post(url(e, "extend"), headers=stranger, json=extend)
    assert refused.status_code == 403, refused.text
    unstated = await client.post(url(e, "extend"), headers=maintainer, json=extend)
    assert unstated.status_code == 422 and list(unstated.json()["errors"]) == ["disclosure"], unstated.text
    assert "state first" in unstated.json()["errors"]["disclosure"][0]
    document = await openapi(client)
    conforms(document, EXTEND_PATH, "post", unstated)

    # the maintainer may state on the embargoed finding; nothing public moves (no feed entry of any kind)
    stated = await client.post(f"/api/v1/findings/{e.canonical}/statements", headers=maintainer, json=AFFECTED)
    assert stated.status_code == 201, stated.text
    assert [entry for entry in await feed(client) if entry.get("canonical") == e.canonical] == []
    # a stranger cannot state on it, nor learn it exists
    assert (
        await client.post(f"/api/v1/findings/{e.canonical}/statements", headers=stranger, json=AFFECTED)
    ).status_code == 404

    for body, field in (
        ({"days": 31, "reason": WHY}, "days"),
        ({"days": 0, "reason": WHY}, "days"),
        ({"days": 5}, "reason"),
    ):
        bad = await client.post(url(e, "extend"), headers=maintainer, json=body)
        assert bad.status_code == 422 and list(bad.json()["errors"]) == [field], (body, bad.text)

    before = await clock(e)
    extended = await client.post(url(e, "extend"), headers=maintainer, json=extend)
    assert extended.status_code == 200, extended.text
    conforms(document, EXTEND_PATH, "post", extended)
    disclosure = extended.json()["disclosure"]
    assert disclosure["state"] == "embargoed"
    assert datetime.fromisoformat(disclosure["deadline"]) == before.deadline + 14 * DAY
    assert [(x["by"], x["days"], x["reason"]) for x in disclosure["extensions"]] == [("maintainer", 14, WHY)]
    [event] = await audited("disclosure.extend")
    assert event.subject_type == "disclosure" and event.reason == WHY and event.after["extended_days"] == 14

    again = await client.post(url(e, "extend"), headers=maintainer, json={"days": 1, "reason": WHY})
    assert again.status_code == 422 and "once" in again.json()["errors"]["disclosure"][0], again.text
    assert (await clock(e)).deadline == before.deadline + 14 * DAY


async def test_a_fixed_statement_moves_the_deadline_to_7_days_later_only_when_sooner(
    client: httpx.AsyncClient,
    forge: Forge,  # noqa: F811 (the fixture imported above)
) -> None:
    far = await embargoed(days=30, title="Path traversal")
    near_ = await embargoed(far.repository, days=7, title="Header injection")
    maintainer = await bearer(await verified_maintainer(forge, far.repository))
    soon = (await clock(near_)).deadline

    for e in (far, near_):
        fixed = await client.post(
            f"/api/v1/findings/{e.canonical}/statements", headers=maintainer, json={"status": "fixed"}
        )
        assert fixed.status_code == 201, fixed.text

    moved = await clock(far)
    assert moved.state == "embargoed" and near(moved.deadline, datetime.now(moved.deadline.tzinfo) + 7 * DAY)
    assert [(x["by"], x["days"], x["reason"]) for x in moved.extensions] == [("maintainer", -23, "fixed")]
    assert (await clock(near_)).deadline == soon and (await clock(near_)).extensions == []  # never later
    [event] = await audited("disclosure.fixed")
    assert event.after["extended_days"] == -23
    # when that deadline passes, the clock's publication says why: fixed
    async with db.transaction() as session:
        await publish_embargoed(session, [await canonical_id(far)], "deadline")
    assert (await clock(far)).published_because == "fixed"
    # the move is no extension: the maintainer may still extend once (after stating affected)
    await client.post(f"/api/v1/findings/{near_.canonical}/statements", headers=maintainer, json=AFFECTED)
    extended = await client.post(url(near_, "extend"), headers=maintainer, json={"days": 3, "reason": WHY})
    assert extended.status_code == 200, extended.text


async def test_a_maintainer_publishes_at_once_public_at_the_next_request(
    client: httpx.AsyncClient,
    forge: Forge,  # noqa: F811 (the fixture imported above)
) -> None:
    e = await embargoed()
    account = await verified_maintainer(forge, e.repository)
    maintainer = await bearer(account)
    await client.post(
        f"/api/v1/findings/{e.canonical}/statements", headers=maintainer, json={"status": "under_investigation"}
    )
    assert (await client.get(f"/findings/{e.occurrence}")).status_code == 404

    published = await client.post(url(e, "publish"), headers=maintainer)
    assert published.status_code == 200, published.text
    conforms(await openapi(client), PUBLISH_PATH, "post", published)
    assert published.json()["disclosure"]["state"] == "published"
    assert published.json()["disclosure"]["published_because"] == "maintainer"
    assert (await client.get(f"/findings/{e.occurrence}")).status_code == 200
    entries = await feed(client)
    assert [x["kind"] for x in entries if x.get("finding") == e.occurrence] == ["finding.published"]
    # the statement made under embargo is announced at publication, after the finding
    statements = [x for x in entries if x["kind"] == "finding.statement" and x["canonical"] == e.canonical]
    assert [x.get("status") for x in statements] == ["under_investigation"]
    [event] = await audited("disclosure.publish")
    assert event.actor_id == account.id and event.after == {"state": "published", "published_because": "maintainer"}

    again = await client.post(url(e, "publish"), headers=maintainer)
    assert again.status_code == 422 and list(again.json()["errors"]) == ["disclosure"], again.text


async def test_the_reporter_publishes_early_only_without_a_repository_window(client: httpx.AsyncClient) -> None:
    mine = await embargoed(days=30)
    reporter = {"Authorization": "Bearer " + await create_token(mine.reporter.id, ["findings:submit"])}
    stranger = {
        "Authorization": "Bearer " + await create_token((await factories.create_account()).id, ["findings:submit"])
    }
    assert (await client.post(url(mine, "publish"), headers=stranger)).status_code == 403
    published = await client.post(url(mine, "publish"), headers=reporter)
    assert published.status_code == 200, published.text
    assert published.json()["disclosure"]["published_because"] == "reporter"
    assert (await client.get(f"/findings/{mine.occurrence}")).status_code == 200

    windowed = await factories.create_repository()
    async with db.transaction() as session:  # the window a verified maintainer set
        await session.execute(text("UPDATE repositories SET disclosure_days = 45 WHERE id = :id"), {"id": windowed.id})
    theirs = await embargoed(windowed, days=7)
    own = {"Authorization": "Bearer " + await create_token(theirs.reporter.id, ["findings:submit"])}
    refused = await client.post(url(theirs, "publish"), headers=own)
    assert refused.status_code == 403 and "window" in refused.text
    assert (await clock(theirs)).state == "embargoed"


async def test_a_moderator_extends_and_publishes_by_form_audited(client: httpx.AsyncClient) -> None:
    e = await embargoed(days=30)
    moderator = await factories.create_account(platform_role="moderator")
    await act_as(client, moderator)
    listed = await client.get("/moderation/disclosures")
    assert listed.status_code == 200 and "Open redirect" in listed.text
    base = f"/moderation/disclosures/{e.canonical}"
    form = {"days": "60", "reason": "Vendor asked, coordinated", "notes": NOTES}

    assert (await client.post(f"{base}/extend", data=form)).status_code == 403  # no Origin: CSRF refused
    short = await client.post(f"{base}/extend", headers=SAME_ORIGIN, data={**form, "reason": "x"})
    assert short.status_code == 422 and "reason" in short.text
    too_far = await client.post(f"{base}/extend", headers=SAME_ORIGIN, data={**form, "days": "91"})
    assert too_far.status_code == 422 and "120 days" in too_far.text  # 30 + 91 > 90 + 30
    start = await clock(e)
    # no once or 30-day limit for moderators, up to reported_at + 120 days; without JavaScript, then with htmx
    done = await client.post(f"{base}/extend", headers=SAME_ORIGIN, data={**form, "days": "60"})
    assert done.status_code == 303 and "recorded=" in done.headers["location"], done.text
    swapped = await client.post(f"{base}/extend", headers=HTMX, data={**form, "days": "30"})
    assert swapped.status_code == 200 and "Recorded as audit event" in swapped.text, swapped.text
    after = await clock(e)
    assert after.deadline == start.reported_at + 120 * DAY
    assert [(x["by"], x["days"]) for x in after.extensions] == [("moderator", 60), ("moderator", 30)]

    published = await client.post(
        f"{base}/publish", headers=SAME_ORIGIN, data={"reason": "Exploited in the wild", "notes": NOTES}
    )
    assert published.status_code == 303, published.text
    final = await clock(e)
    assert (final.state, final.published_because) == ("published", "moderator")
    events = await audited("disclosure.extend") + await audited("disclosure.publish")
    assert [(x.actor_id, x.subject_type) for x in events] == [(moderator.id, "disclosure")] * 3
    assert events[-1].reason == "Exploited in the wild"
    await act_as(client, None)
    assert (await client.get(f"/findings/{e.occurrence}")).status_code == 200
