"""The way into an embargo (docs/domain.md "Coordinated disclosure"): a reporter's `"disclosure": {"days": N}` (7-90;
SARIF's `?disclosure_days=N`, batch lines alike) or the repository's own window; the deadline is the report's time
plus the larger of the two, at most 90 days; a duplicate never resets or shortens the clock; a finding already
public is never embargoed; and while embargoed nothing of the finding is public, not even a feed entry."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import httpx
from sqlalchemy import text

from app.evidence.publish import Decision, publish_decided
from app.kernel import db
from app.registry.models import Repository
from app.reports.service import submit_report
from tests import factories
from tests.evidence.support import pending_report
from tests.reports.support import finding, report_body, row_counts
from tests.reports.test_reports_api import post, reports_url, token_for
from tests.reports.test_sarif_bounds import _log, _result
from tests.reports.test_sarif_in import COMMIT, post_sarif
from tests.trust.test_outcomes import _decided

DAY = timedelta(days=1)

_CLOCK = text("""
SELECT d.state, d.deadline - d.reported_at AS window, d.reporter_days, d.repository_days, d.deadline,
       s.disclosure_days AS asked, d.reported_at = s.inserted_at AS from_report
FROM disclosures d JOIN canonical_findings c ON c.id = d.canonical_finding_id
JOIN scan_findings f ON f.canonical_finding_id = c.id JOIN scans s ON s.id = f.scan_id
WHERE c.public_id = CAST(:cid AS uuid) ORDER BY s.id LIMIT 1
""")


async def clock(canonical_public_id: str) -> Any:
    async with db.read_session(replica=False) as session:
        return (await session.execute(_CLOCK, {"cid": canonical_public_id})).first()


async def window(repo: Repository, days: int) -> None:
    """The repository's own window, as a verified maintainer sets it."""
    async with db.transaction() as session:
        await session.execute(
            text("UPDATE repositories SET disclosure_days = :d WHERE id = :id"), {"d": days, "id": repo.id}
        )


async def report(repo: Repository, title: str, days: int | None = None) -> dict[str, Any]:
    """A new account's report of one finding titled `title` (the service as the route calls it)."""
    author = await factories.create_account(state="active")
    extra = {} if days is None else {"disclosure": {"days": days}}
    body = report_body([finding(title=title, file=f"src/{title.split()[0].lower()}.py")], **extra)
    return await submit_report(author, repo.host, repo.owner, repo.name, body)


async def test_the_days_asked_are_an_integer_from_7_to_90_or_nothing_is_written(client: httpx.AsyncClient) -> None:
    repo = await factories.create_repository()
    headers = await token_for(await factories.create_account(state="active"))
    refused = {
        "disclosure.days": [
            {"days": 6},
            {"days": 91},
            {"days": "30"},
            {"days": 30.5},
            {"days": True},
            {"days": None},
            {},
        ],
        "disclosure": [30, [30], "30 days"],
    }
    for field, shapes in refused.items():
        for shape in shapes:
            response = await post(client, reports_url(repo), headers, report_body(disclosure=shape))
            assert response.status_code == 422, shape
            assert list(response.json()["errors"]) == [field], shape
    assert (await row_counts())["scans"] == 0
    # null is no request (like every optional key of the envelope): published at once
    response = await post(client, reports_url(repo), headers, report_body(disclosure=None))
    assert response.status_code == 201 and response.json()["disclosed"] is True
    # the older envelope (`tarakan_review_format`) asks alike
    legacy = report_body([finding(title="Legacy envelope")], disclosure={"days": 7})
    legacy["document"] = {"tarakan_review_format": 1, "findings": legacy["document"]["findings"]}
    response = await post(client, reports_url(repo), headers, legacy)
    assert response.status_code == 201 and response.json()["findings"][0]["held"] == "embargo"


async def test_an_embargoed_finding_is_on_no_public_surface_not_even_the_feed(client: httpx.AsyncClient) -> None:
    repo = await factories.create_repository()
    headers = await token_for(await factories.create_account(state="active"))
    response = await post(client, reports_url(repo), headers, report_body(disclosure={"days": 30}))
    assert response.status_code == 201, response.text
    answer = response.json()
    (held,) = answer["findings"]
    assert (held["held"], answer["disclosed"]) == ("embargo", False)
    row = await clock(held["canonical_public_id"])
    assert (row.state, row.reporter_days, row.repository_days, row.asked) == ("embargoed", 30, 0, 30)
    assert row.window == 30 * DAY
    assert row.from_report  # EVIDENCE_CHECK off (the tests' default): the clock runs from the report's time

    assert (await client.get(f"/findings/{held['public_id']}")).status_code == 404
    feed = (await client.get("/api/v1/changes", params={"limit": 1000})).text
    for mark in (held["public_id"], held["canonical_public_id"]):
        assert mark not in feed
    async with db.read_session(replica=False) as session:
        dirty = await session.execute(
            text("SELECT count(*) FROM infestation_dirty_keys WHERE pattern_key = :k"), {"k": held["pattern_key"]}
        )
        assert dirty.scalar_one() == 0  # nothing of its pattern moves until the clock publishes it
    # the submitter still sees it as stored
    again = await client.get(f"/api/v1/reports/{answer['id']}", headers=headers)
    assert again.json()["findings"][0]["held"] == "embargo" and again.json()["disclosed"] is False


async def test_the_deadline_is_the_larger_window_at_most_90_days() -> None:
    repo = await factories.create_repository()
    await window(repo, 60)
    cases = {"Larger repository window": (30, 60), "Larger reporter window": (75, 75), "Longest window": (90, 90)}
    for title, (asked, days) in cases.items():
        (held,) = (await report(repo, title, asked))["findings"]
        assert held["held"] == "embargo"
        row = await clock(held["canonical_public_id"])
        assert (row.window, row.reporter_days, row.repository_days) == (days * DAY, asked, 60), title
    (held,) = (await report(repo, "Repository window only"))["findings"]  # the reporter asked nothing
    assert (await clock(held["canonical_public_id"])).window == 60 * DAY
    await window(repo, 90)
    (held,) = (await report(repo, "Both windows capped", 90))["findings"]
    assert (await clock(held["canonical_public_id"])).window == 90 * DAY


async def test_a_duplicate_is_held_and_never_resets_or_shortens_the_clock() -> None:
    repo = await factories.create_repository()
    first = await report(repo, "Overflow in the parser", 30)
    cid = first["findings"][0]["canonical_public_id"]
    async with db.transaction() as session:  # ten days pass
        await session.execute(
            text(
                "UPDATE disclosures SET reported_at = reported_at - interval '10 days', "
                "deadline = deadline - interval '10 days'"
            )
        )
    deadline = (await clock(cid)).deadline
    for asked in (90, 7, None):  # longer, shorter, none: the clock is the canonical's
        duplicate = await report(repo, "Overflow in the parser", asked)
        (held,) = duplicate["findings"]
        assert (held["canonical_public_id"], held["held"], duplicate["disclosed"]) == (cid, "embargo", False)
        assert (await clock(cid)).deadline == deadline


async def test_a_finding_already_public_is_never_embargoed(client: httpx.AsyncClient) -> None:
    repo = await factories.create_repository()
    public = await report(repo, "Leak in the logger")
    late = await report(repo, "Leak in the logger", 30)
    (again,) = late["findings"]
    assert again["canonical_public_id"] == public["findings"][0]["canonical_public_id"]
    assert (again["held"], late["disclosed"]) == (None, True)
    assert await clock(again["canonical_public_id"]) is None
    assert (await client.get(f"/findings/{again['public_id']}")).status_code == 200


async def test_sarif_and_batch_lines_ask_alike(client: httpx.AsyncClient) -> None:
    repo = await factories.create_repository()
    headers = await token_for(await factories.create_account(state="active"))
    log = _log([_result("app.py")])
    for bad in ("6", "91", "thirty", "", "1e1"):
        refused = await post_sarif(client, reports_url(repo), headers, log, commit_sha=COMMIT, disclosure_days=bad)
        assert refused.status_code == 422 and list(refused.json()["errors"]) == ["disclosure_days"], bad
    sarif = await post_sarif(client, reports_url(repo), headers, log, commit_sha=COMMIT, disclosure_days="14")
    assert sarif.status_code == 201, sarif.text
    assert (sarif.json()["findings"][0]["held"], sarif.json()["disclosed"]) == ("embargo", False)
    assert (await clock(sarif.json()["findings"][0]["canonical_public_id"])).window == 14 * DAY

    ref = f"{repo.host}/{repo.owner}/{repo.name}"
    lines = [
        {"repository": ref, **report_body([finding(title="Batch embargo")], disclosure={"days": 20})},
        {"repository": ref, **report_body([finding(title="Batch refused")], disclosure={"days": 5})},
    ]
    response = await client.post(
        "/api/v1/reports/batch",
        headers=headers | {"Content-Type": "application/x-ndjson"},
        content="\n".join(json.dumps(line) for line in lines) + "\n",
    )
    stored, refused_line = (json.loads(line) for line in response.text.splitlines())
    assert stored["status"] == 201 and stored["report"]["findings"][0]["held"] == "embargo"
    assert (await clock(stored["report"]["findings"][0]["canonical_public_id"])).window == 20 * DAY
    assert (refused_line["status"], list(refused_line["errors"])) == (422, ["disclosure.days"])


_AGED = text("UPDATE scans SET inserted_at = now() - interval '2 days', disclosure_days = :d WHERE id = :id")
_HELD = text("SELECT held_reason, published_at IS NULL AS unpublished FROM scan_findings WHERE id = :id")


async def test_evidence_confirmed_later_opens_the_clock_then_and_holds_a_gated_reporters_finding(
    client: httpx.AsyncClient,
) -> None:
    repo = await factories.create_repository()
    author = await factories.create_account(state="active")
    pending = await pending_report(repo, author, [("src/late.py", "Confirmed two days later")])
    ((finding_id, public_id),) = pending.findings
    async with db.transaction() as session:
        await session.execute(_AGED, {"d": 30, "id": pending.scan_id})
        await publish_decided(
            session, pending.scan_id, [Decision(finding_id, "confirmed", anchor="sha256:" + "b" * 64)]
        )
        opened = (
            await session.execute(
                text("SELECT now() AS at, d.reported_at, d.deadline FROM disclosures d WHERE d.repository_id = :r"),
                {"r": repo.id},
            )
        ).one()
        assert (await session.execute(_HELD, {"id": finding_id})).one() == ("embargo", True)
    assert (opened.reported_at, opened.deadline) == (opened.at, opened.at + 30 * DAY)  # from the confirmation
    assert (await client.get(f"/findings/{public_id}")).status_code == 404

    gated = await factories.create_account(state="active")
    await _decided(gated, verified=1, disputed=9)
    pending = await pending_report(repo, gated, [("src/gated.py", "Confirmed for a gated reporter")])
    ((finding_id, public_id),) = pending.findings
    async with db.transaction() as session:
        done = await publish_decided(session, pending.scan_id, [Decision(finding_id, "unchecked")])
        assert (await session.execute(_HELD, {"id": finding_id})).one() == ("low_signal", True)
    assert done is not None and done.published == 0
    assert (await client.get(f"/findings/{public_id}")).status_code == 404
    assert public_id not in (await client.get("/api/v1/changes", params={"limit": 1000})).text
