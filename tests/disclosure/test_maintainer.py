"""The maintainer is told first (docs/domain.md "Coordinated disclosure"): a verified maintainer sets the repository's
window, sees its embargoed findings in full (API and maintain page; the view tells them), acknowledges a clock, and
their webhook receives a signed `finding.embargoed` delivery carrying the finding while the public feed carries
nothing of it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openapi_schema_validator import OAS31Validator

from app.feed.entries import rendered_entry
from app.maintainers import delivery, webhook_queue, webhooks
from app.registry.models import Repository
from app.reports.service import submit_report
from app.site.openapi import DOCUMENT
from tests import factories
from tests.maintainers.webhook_support import Receiver, maintainer, verify
from tests.moderation.support import SAME_ORIGIN, act_as
from tests.reports.support import finding, report_body
from tests.sql import execute, one, rows, scalar

TITLE = "Hard-coded signing key in session middleware"


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    monkeypatch.setenv("WEBHOOK_ALLOW_PRIVATE", "1")  # the receiver listens on loopback
    served = Receiver()
    try:
        yield served
    finally:
        served.close()


def repo_url(repo: Repository, tail: str) -> str:
    return f"/api/v1/repos/{repo.host}/{repo.owner}/{repo.name}/{tail}"


async def report(repo: Repository, days: int | None = 30) -> dict[str, Any]:
    author = await factories.create_account(state="active")
    extra = {} if days is None else {"disclosure": {"days": days}}
    body = report_body([finding(title=TITLE, file="src/session.py")], **extra)
    return await submit_report(author, repo.host, repo.owner, repo.name, body)


async def clock(canonical_public_id: str) -> dict[str, Any]:
    found = await one(
        "SELECT d.* FROM disclosures d JOIN canonical_findings c ON c.id = d.canonical_finding_id"
        " WHERE c.public_id = CAST(:c AS uuid)",
        c=canonical_public_id,
    )
    assert found is not None
    return found


async def test_a_verified_maintainer_sets_the_window_audited_and_nobody_else(client: httpx.AsyncClient) -> None:
    repo = await factories.create_repository()
    owner, headers = await maintainer(repo)
    _, stranger = await maintainer(await factories.create_repository())  # maintains another repository

    response = await client.put(repo_url(repo, "disclosure"), json={"days": 45}, headers=headers)
    assert response.status_code == 200, response.text
    assert response.json() == {"repository": f"{repo.host}/{repo.owner}/{repo.name}", "disclosure_days": 45}
    assert await scalar("SELECT disclosure_days FROM repositories WHERE id = :id", id=repo.id) == 45
    audited = await rows("SELECT actor_id, action, before, after FROM audit_events WHERE action LIKE 'repository.%'")
    assert audited == [
        {
            "actor_id": owner.id,
            "action": "repository.disclosure_window",
            "before": {"disclosure_days": 0},
            "after": {"disclosure_days": 45},
        }
    ]

    refused = await client.put(repo_url(repo, "disclosure"), json={"days": 10}, headers=stranger)
    assert refused.status_code == 403 and list(refused.json()["errors"]) == ["repository"]
    for days in (91, -1, "30", 7.5, True, None):
        bad = await client.put(repo_url(repo, "disclosure"), json={"days": days}, headers=headers)
        assert bad.status_code == 422 and list(bad.json()["errors"]) == ["days"], days
    assert (await client.put(repo_url(repo, "disclosure"), json={}, headers=headers)).status_code == 422
    assert await scalar("SELECT disclosure_days FROM repositories WHERE id = :id", id=repo.id) == 45


async def test_the_maintainer_sees_the_embargoed_finding_in_full_and_acknowledges_it(
    client: httpx.AsyncClient,
) -> None:
    repo = await factories.create_repository()
    owner, headers = await maintainer(repo)
    _, stranger = await maintainer(await factories.create_repository())
    # the maintainer's own window, by the form on the maintain page
    await act_as(client, owner)
    maintain = f"/repos/{repo.host}/{repo.owner}/{repo.name}/maintain"
    refused = await client.post(maintain + "/disclosure", data={"days": "120"}, headers=SAME_ORIGIN)
    assert refused.status_code == 422 and "days: must be a whole number of days from 0 to 90" in refused.text
    saved = await client.post(maintain + "/disclosure", data={"days": "21"}, headers=SAME_ORIGIN)
    assert saved.status_code == 303
    assert await scalar("SELECT disclosure_days FROM repositories WHERE id = :id", id=repo.id) == 21

    submitted = await report(repo, days=None)  # the repository's window alone embargoes it
    found = submitted["findings"][0]
    assert (await clock(found["canonical_public_id"]))["notified_at"] is None

    assert (await client.get(repo_url(repo, "embargoed"), headers=stranger)).status_code == 403
    listed = await client.get(repo_url(repo, "embargoed"), headers=headers)
    assert listed.status_code == 200, listed.text
    assert listed.headers["cache-control"] == "private, no-store"
    [item] = listed.json()["items"]
    assert item["finding"]["title"] == TITLE and item["finding"]["file_path"] == "src/session.py"
    assert item["finding"]["public_id"] == found["public_id"]
    assert item["finding"]["description"] and item["finding"]["commit_sha"]
    assert item["disclosure"]["state"] == "embargoed" and item["disclosure"]["published_because"] is None
    assert item["disclosure"]["notified_at"] is not None and item["disclosure"]["acknowledged_at"] is None
    assert (await clock(found["canonical_public_id"]))["notified_at"] is not None  # their first view told them

    page = await client.get(maintain)
    assert page.status_code == 200
    assert 'action="' + maintain + '/disclosure"' in page.text and 'value="21"' in page.text
    assert TITLE in page.text and "src/session.py" in page.text and found["public_id"] in page.text
    assert not re.search(r'datetime="[^"]*\.[0-9]{4,}', page.text)  # HTML takes at most milliseconds

    await act_as(client, None)  # the API: a bearer token, no session
    ack_url = f"/api/v1/findings/{found['public_id']}/disclosure/acknowledge"
    not_theirs = await client.post(ack_url, headers=stranger)
    assert not_theirs.status_code == 403 and list(not_theirs.json()["errors"]) == ["finding"]
    acknowledged = await client.post(ack_url, headers=headers)
    assert acknowledged.status_code == 200, acknowledged.text
    first = acknowledged.json()["disclosure"]["acknowledged_at"]
    assert first is not None and acknowledged.json()["disclosure"]["state"] == "embargoed"
    again = await client.post(ack_url, headers=headers)
    assert again.json()["disclosure"]["acknowledged_at"] == first  # once
    assert (await client.post("/api/v1/findings/nope/disclosure/acknowledge", headers=headers)).status_code == 404


async def test_the_maintainers_webhook_receives_the_finding_while_the_public_feed_carries_nothing(
    client: httpx.AsyncClient, receiver: Receiver
) -> None:
    repo = await factories.create_repository()
    owner, headers = await maintainer(repo)
    registered = await webhooks.register_webhook(owner.id, repo.host, repo.owner, repo.name, receiver.url)
    elsewhere = await factories.create_repository()
    other, _ = await maintainer(elsewhere)
    await webhooks.register_webhook(other.id, elsewhere.host, elsewhere.owner, elsewhere.name, receiver.url)

    submitted = await report(repo, days=30)
    found = submitted["findings"][0]
    await delivery.run(rendered_entry, lanes=2)

    # this repository's webhook only; beside the feed's own entries (the repository's), which name nothing of it
    told = [r for r in receiver.received if r.headers["x-tarakan-event"] == "finding.embargoed"]
    [received] = told
    others = [r.body.decode() for r in receiver.received if r not in told]
    assert all(found["public_id"] not in o and TITLE not in o for o in others)
    assert received.signed_with(registered.secret)
    assert verify(registered.secret, received.headers, received.body, received.at)
    assert received.headers["x-tarakan-event"] == "finding.embargoed"
    body = received.json
    assert body["delivery"] == received.delivery
    described = DOCUMENT["webhooks"]["findingEmbargoed"]["post"]["requestBody"]["content"]["application/json"]
    OAS31Validator(described["schema"] | {"components": DOCUMENT["components"]}).validate(body)
    entry = body["entry"]
    assert entry["kind"] == "finding.embargoed" and entry["at"]
    assert entry["finding"]["title"] == TITLE and entry["finding"]["public_id"] == found["public_id"]
    assert entry["finding"]["repository"] == {"host": repo.host, "owner": repo.owner, "name": repo.name}
    assert entry["disclosure"]["state"] == "embargoed" and entry["disclosure"]["deadline"]
    assert (await clock(found["canonical_public_id"]))["notified_at"] is not None  # the 2xx told them

    feed = await client.get("/api/v1/changes")
    assert feed.status_code == 200
    text = json.dumps(feed.json())
    assert found["public_id"] not in text and found["canonical_public_id"] not in text and TITLE not in text

    # the log shows the private entry (no seq); a second run sends nothing again
    log = await client.get(f"/api/v1/webhooks/{registered.webhook.id}/deliveries", headers=headers)
    assert ("finding.embargoed", None, 200) in [(d["kind"], d["seq"], d["last_status"]) for d in log.json()["entries"]]
    # a webhook registered while the clock runs is told too (the sweep), and the first one not again
    late_owner, _ = await maintainer(repo)
    late = await webhooks.register_webhook(late_owner.id, repo.host, repo.owner, repo.name, receiver.url)
    await delivery.run(rendered_entry, lanes=2)
    [late_told] = [r for r in receiver.received if r.headers["x-tarakan-event"] == "finding.embargoed"][1:]
    assert late_told.signed_with(late.secret) and late_told.json["entry"]["finding"]["title"] == TITLE
    again = await delivery.run(rendered_entry, lanes=2)
    assert again.fanned_out == 0
    assert [r for r in receiver.received if r.headers["x-tarakan-event"] == "finding.embargoed"] == [
        received,
        late_told,
    ]


async def test_a_finding_held_for_low_signal_is_neither_listed_nor_sent(
    client: httpx.AsyncClient, receiver: Receiver
) -> None:
    repo = await factories.create_repository()
    owner, headers = await maintainer(repo)
    await webhooks.register_webhook(owner.id, repo.host, repo.owner, repo.name, receiver.url)
    found = (await report(repo, days=30))["findings"][0]
    # earned trust's hold keeps it back first (app/reports/held.py): the clock runs, nobody is told yet
    await execute("UPDATE scan_findings SET held_reason = 'low_signal' WHERE public_id = :p", p=found["public_id"])

    await delivery.run(rendered_entry, lanes=2)
    assert not [r for r in receiver.received if r.headers["x-tarakan-event"] == "finding.embargoed"]
    listed = await client.get(repo_url(repo, "embargoed"), headers=headers)
    assert listed.status_code == 200 and listed.json()["items"] == []
    assert (await clock(found["canonical_public_id"]))["notified_at"] is None

    # released to the embargo's hold, it is queued for the webhook; a maintainership that ends before the attempt
    # is told nothing (the delivery is dropped)
    await execute("UPDATE scan_findings SET held_reason = 'embargo' WHERE public_id = :p", p=found["public_id"])
    assert await webhook_queue.enqueue_embargoed() == 1
    await execute(
        "UPDATE repository_maintainers SET ended_at = now(), ended_reason = 'file_missing' WHERE account_id = :a",
        a=owner.id,
    )
    await delivery.run(rendered_entry, lanes=2)
    assert not [r for r in receiver.received if r.headers["x-tarakan-event"] == "finding.embargoed"]
    assert await scalar("SELECT count(*) FROM webhook_deliveries WHERE canonical_finding_id IS NOT NULL") == 0
    assert (await clock(found["canonical_public_id"]))["notified_at"] is None
