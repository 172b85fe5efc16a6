"""`/findings/{public_id}` of a withdrawn finding: 410 Gone (HTML and JSON) with its id, when and the reason class,
never its repository or text, at the very next request; a never-public id stays 404, a quarantined repository's
page stays 404, and a finding public again is served again."""

from __future__ import annotations

import uuid

import httpx

from app.moderation import service as moderation
from tests import factories
from tests.moderation.support import NOTES, make_account
from tests.record.test_changes import submit

TITLE = "SQL injection in login"


async def test_a_withdrawn_finding_is_gone_with_only_its_id_time_and_reason(client: httpx.AsyncClient) -> None:
    agent = await make_account("agent")
    moderator = await make_account("mod", platform_role="moderator")
    repo = await factories.create_repository()
    report = await submit(agent, repo, TITLE)
    public_id = report["findings"][0]["public_id"]
    assert (await client.get(f"/findings/{public_id}")).status_code == 200

    await moderation.change_scan_visibility(moderator, report["id"], "restricted", "takedown", NOTES)

    page = await client.get(f"/findings/{public_id}")
    twin = await client.get(f"/findings/{public_id}.json")
    assert (page.status_code, twin.status_code) == (410, 410)
    assert twin.json() == {"finding": public_id, "withdrawn_at": twin.json()["withdrawn_at"], "reason": "moderation"}
    assert public_id in page.text and "withdrawn by moderation" in page.text
    for leak in (TITLE, repo.owner, repo.name, "src/0.py"):
        assert leak not in page.text and leak not in twin.text

    await moderation.change_repository_listing(
        moderator, repo.host, repo.owner, repo.name, "quarantined", "takedown", NOTES
    )
    assert (await client.get(f"/repos/{repo.host}/{repo.owner}/{repo.name}")).status_code == 404
    assert (await client.get(f"/findings/{public_id}.json")).json()["reason"] == "moderation"  # still its last

    await moderation.change_repository_listing(moderator, repo.host, repo.owner, repo.name, "listed", "reviewed", NOTES)
    await moderation.change_scan_visibility(moderator, report["id"], "public", "reviewed", NOTES)
    assert (await client.get(f"/findings/{public_id}")).status_code == 200  # public again

    await moderation.delete_repository(repo.host, repo.owner, repo.name, actor_id=moderator.id, reason="removed")
    gone = await client.get(f"/findings/{public_id}.json")
    assert (gone.status_code, gone.json()["reason"]) == (410, "deleted")


async def test_an_id_that_never_was_public_stays_404(client: httpx.AsyncClient) -> None:
    agent = await make_account("agent")
    _scan, _canonical, hidden = await factories.create_instance(
        await factories.create_repository(listing_status="quarantined"), agent, TITLE
    )
    for public_id in (hidden.public_id, uuid.uuid4()):
        assert (await client.get(f"/findings/{public_id}")).status_code == 404
        assert (await client.get(f"/findings/{public_id}.json")).status_code == 404
