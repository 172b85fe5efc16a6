"""GET /api/v1/changes over HTTP: the page shape and its cursor, every kind as a mirror reads it, what a withdrawal
hides from earlier entries at the very next request (no worker), and 400s naming the field."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.moderation import service as moderation
from tests import factories
from tests.moderation.support import NOTES, agent_and_moderator, make_account
from tests.record.test_changes import submit
from tests.reports.support import reach_quorum
from tests.site.test_openapi import _conforms

TITLE = "SQL injection in login"
PATH = "src/0.py"  # the file `submit` gives the first finding


async def feed(client: httpx.AsyncClient, **params: Any) -> dict[str, Any]:
    response = await client.get("/api/v1/changes", params=params)
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "no-cache"
    return dict(response.json())


async def everything(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    return list((await feed(client, limit=1000))["entries"])


async def test_pages_walk_the_feed_oldest_first_and_the_end_hands_back_a_cursor_to_poll_from(
    client: httpx.AsyncClient,
) -> None:
    empty = await feed(client)
    assert empty["entries"] == [] and empty["next_cursor"]
    agent = await make_account("agent")
    report = await submit(agent, await factories.create_repository(), TITLE, "Path traversal in upload")

    walked: list[dict[str, Any]] = []
    cursor = empty["next_cursor"]  # a client that polled the empty feed resumes from there
    for _ in range(4):
        page = await feed(client, cursor=cursor, limit=2)
        walked += page["entries"]
        cursor = page["next_cursor"]
    assert page["entries"] == [] and cursor == page["next_cursor"]
    assert walked == await everything(client)
    assert [e["seq"] for e in walked] == sorted({e["seq"] for e in walked})
    published = [e for e in walked if e["kind"] == "finding.published"]
    assert {e["finding"] for e in published} == {f["public_id"] for f in report["findings"]}
    listed = walked[0]
    assert set(listed) == {"seq", "at", "kind", "repository", "repository_id"}
    assert set(published[0]) == {
        "seq",
        "at",
        "kind",
        "finding",
        "canonical",
        "repository",
        "repository_id",
        "pattern_key",
    }
    assert (
        published[0]["repository"] == listed["repository"] and published[0]["repository_id"] == listed["repository_id"]
    )
    assert listed["repository_id"].count("-") == 4  # an opaque uuid, not the serial id


async def test_a_withdrawal_redacts_earlier_entries_at_the_next_request(client: httpx.AsyncClient) -> None:
    agent, moderator = await agent_and_moderator()
    repo = await factories.create_repository()
    report = await submit(agent, repo, TITLE)
    canonical = report["findings"][0]["canonical_public_id"]
    await reach_quorum(canonical, "confirmed")
    before = await everything(client)
    assert [e["kind"] for e in before] == ["repository.listed", "finding.published", "finding.status", "finding.status"]
    assert before[-1]["status"] == "verified"

    await moderation.change_repository_listing(
        moderator, repo.host, repo.owner, repo.name, "quarantined", "takedown", NOTES
    )

    response = await client.get("/api/v1/changes", params={"limit": 1000})
    after = response.json()["entries"]
    assert [e["seq"] for e in after[:4]] == [e["seq"] for e in before]
    assert [{k: e[k] for k in ("seq", "at", "kind")} for e in after[:4]] == [
        {k: e[k] for k in ("seq", "at", "kind")} for e in before
    ]
    assert set(after[0]) == {"seq", "at", "kind", "repository_id"}
    assert set(after[1]) == {"seq", "at", "kind", "finding"}  # not even the opaque repository id
    assert set(after[2]) == set(after[3]) == {"seq", "at", "kind", "canonical"}
    assert [(e["kind"], e.get("reason")) for e in after[4:]] == [
        ("finding.withdrawn", "repository"),
        ("repository.withdrawn", None),
    ]
    assert set(after[4]) == {"seq", "at", "kind", "finding", "reason"}
    assert after[5] == {k: after[5][k] for k in ("seq", "at", "kind")} | {"repository_id": before[0]["repository_id"]}
    for leak in (TITLE, PATH, repo.owner, repo.name, report["findings"][0]["pattern_key"]):
        assert leak not in response.text

    await moderation.change_repository_listing(moderator, repo.host, repo.owner, repo.name, "listed", "reviewed", NOTES)
    again = await everything(client)
    assert again[:4] == before  # public again: the history reads as it did
    assert [e["kind"] for e in again[6:]] == ["repository.listed", "finding.published", "finding.status"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"limit": "²"}, "limit"),
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"cursor": ""}, "cursor"),
    ],
)
async def test_a_bad_limit_or_cursor_is_a_400_naming_the_field(
    client: httpx.AsyncClient, params: dict[str, str], field: str
) -> None:
    response = await client.get("/api/v1/changes", params=params)
    assert response.status_code == 400
    assert list(response.json()["errors"]) == [field]


async def test_the_feed_and_a_tombstone_answer_as_the_openapi_document_says(client: httpx.AsyncClient) -> None:
    agent, moderator = await agent_and_moderator()
    report = await submit(agent, await factories.create_repository(), TITLE)
    await moderation.change_scan_visibility(moderator, report["id"], "restricted", "takedown", NOTES)
    document = (await client.get("/api/v1/openapi.json")).json()

    _conforms(document, "/api/v1/changes", "get", await client.get("/api/v1/changes"))
    _conforms(document, "/api/v1/changes", "get", await client.get("/api/v1/changes?limit=0"))
    gone = await client.get(f"/findings/{report['findings'][0]['public_id']}.json")
    assert gone.status_code == 410
    _conforms(document, "/findings/{ref}.json", "get", gone)
