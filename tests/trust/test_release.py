"""Releases of findings held for review (issue 38 item 3) other than a reviewer's check: a verified maintainer's
statement on one, and a moderator's release of an account's whole queue (form and CLI, audited); the console's
queue of held findings with the reporter's signal; and the export's precision file in the OpenAPI document."""

from __future__ import annotations

import json
from typing import Any

import httpx
from sqlalchemy import text

from app.accounts.models import Account
from app.accounts.service import create_token
from app.exports.service import FILE_NAMES
from app.kernel import db
from app.maintainers.models import RepositoryMaintainer
from app.moderation.signal import release_queue
from app.registry.models import Repository
from app.reports.service import submit_report
from tests import factories
from tests.harness import tarakan
from tests.moderation.support import NOTES, SAME_ORIGIN, act_as, make_account
from tests.reports.support import finding, report_body
from tests.trust.test_outcomes import _decided


async def _held_report(account: Account, repo: Repository, *titles: str) -> list[dict[str, Any]]:
    """A report of `titles` by a gated account: each finding held for low signal."""
    body = report_body([finding(title=t, file=f"src/{i}.py") for i, t in enumerate(titles)])
    answer = await submit_report(account, repo.host, repo.owner, repo.name, body)
    assert [f["held"] for f in answer["findings"]] == ["low_signal"] * len(titles)
    return list(answer["findings"])


async def _gated(handle: str) -> Account:
    account = await make_account(handle)
    await _decided(account, verified=1, disputed=9)  # (1 + 2) / (10 + 4) = 0.21, under the floor of 0.3
    return account


async def _release_events() -> list[tuple[Any, ...]]:
    async with db.read_session(replica=False) as session:
        rows = await session.execute(
            text("SELECT subject_id, before, after, reason FROM audit_events WHERE action = 'account.held_release'")
        )
        return [tuple(r) for r in rows]


def _release_form(reason: str = "reviewed the queue") -> dict[str, str]:
    return {"reason": reason, "notes": NOTES}


async def test_a_maintainers_statement_releases_the_held_finding(client: httpx.AsyncClient) -> None:
    repo = await factories.create_repository()
    gated = await _gated("lowsignal")
    (held,) = await _held_report(gated, repo, "Path traversal in the upload handler")
    maintainer, stranger = await make_account("keeper"), await make_account("stranger")
    async with db.transaction() as session:
        session.add(RepositoryMaintainer(repository_id=repo.id, account_id=maintainer.id))
    url = f"/api/v1/findings/{held['canonical_public_id']}/statements"
    body = {"status": "affected", "action_statement": "Upgrade to 2.1, which checks the path."}

    assert (await client.get(f"/findings/{held['public_id']}")).status_code == 404
    # to whoever does not maintain the repository, a held finding does not exist
    stranger_token = await create_token(stranger.id, ["repositories:maintain"])
    refused = await client.post(url, json=body, headers={"Authorization": f"Bearer {stranger_token}"})
    assert refused.status_code == 404 and refused.json()["errors"] == {"finding": ["not found"]}
    assert (await client.get(f"/findings/{held['public_id']}")).status_code == 404

    token = await create_token(maintainer.id, ["repositories:maintain"])
    said = await client.post(url, json=body, headers={"Authorization": f"Bearer {token}"})
    assert said.status_code == 201, said.text
    page = await client.get(f"/findings/{held['public_id']}")
    assert page.status_code == 200 and "Upgrade to 2.1" in page.text
    kinds = [e["kind"] for e in (await client.get("/api/v1/changes", params={"limit": 1000})).json()["entries"]]
    assert kinds.count("finding.published") == 1 and kinds.index("finding.published") < kinds.index("finding.statement")


async def test_a_moderator_releases_an_accounts_queue_by_form_audited_once(client: httpx.AsyncClient) -> None:
    repo = await factories.create_repository()
    gated, other = await _gated("lowsignal"), await _gated("otherlow")
    mine = await _held_report(gated, repo, "Open redirect after login", "Debug endpoint left on")
    (theirs,) = await _held_report(other, repo, "Hard-coded session secret")
    moderator, member = await make_account("mod", platform_role="moderator"), await make_account("member")

    await act_as(client, member)
    refused = await client.post("/moderation/accounts/lowsignal/release", data=_release_form(), headers=SAME_ORIGIN)
    assert refused.status_code == 403
    assert (await client.get("/moderation/held")).status_code == 403

    await act_as(client, moderator)
    queue = await client.get("/moderation/held")
    assert queue.status_code == 200
    for held in (*mine, theirs):
        assert held["canonical_public_id"] in queue.text
    # the reporter's signal beside each: precision, decided, gate
    assert "@lowsignal</td>\n    <td>0.21</td>\n    <td>10</td>\n    <td>held</td>" in queue.text
    assert 'href="/moderation/held"' in (await client.get("/review-queue")).text  # the reviewers' page points here
    accounts = await client.get("/moderation/accounts")
    assert "Release @lowsignal's 2 held findings" in accounts.text

    bad = await client.post("/moderation/accounts/lowsignal/release", data=_release_form("x"), headers=SAME_ORIGIN)
    assert bad.status_code == 422 and "must be 3 to 100 characters" in bad.text
    no_origin = await client.post("/moderation/accounts/lowsignal/release", data=_release_form())
    assert no_origin.status_code == 403  # CSRF: a cross-site form is refused

    done = await client.post(
        "/moderation/accounts/lowsignal/release",
        data={**_release_form(), "return_to": "/moderation/held"},
        headers=SAME_ORIGIN,
    )
    assert done.status_code == 303 and done.headers["location"].startswith("/moderation/held?recorded=")
    await act_as(client, None)  # what the public sees
    for held in mine:
        assert (await client.get(f"/findings/{held['public_id']}")).status_code == 200
    assert (await client.get(f"/findings/{theirs['public_id']}")).status_code == 404
    assert await _release_events() == [
        (
            "lowsignal",
            {"held": 2, "published": 0, "embargoed": 0},
            {"held": 0, "published": 2, "embargoed": 0},
            "reviewed the queue",
        )
    ]
    await act_as(client, moderator)
    after = (await client.get("/moderation/held")).text
    assert theirs["canonical_public_id"] in after and mine[0]["canonical_public_id"] not in after
    again = await client.post("/moderation/accounts/lowsignal/release", data=_release_form(), headers=SAME_ORIGIN)
    assert again.status_code == 422 and "has no finding held for review" in again.text

    # the same action from the command line
    common = ["--reason", "reviewed the queue", "--notes", NOTES, "--as", moderator.email]
    cli = await tarakan("moderate", "release", "--handle", "otherlow", *common)
    assert cli.code == 0, cli.err
    assert json.loads(cli.out.splitlines()[0])["after"] == {"held": 0, "published": 1, "embargoed": 0}
    await act_as(client, None)
    assert (await client.get(f"/findings/{theirs['public_id']}")).status_code == 200
    assert len(await _release_events()) == 2


async def test_a_release_moves_an_embargoed_finding_to_the_embargos_hold(client: httpx.AsyncClient) -> None:
    repo = await factories.create_repository()
    gated = await _gated("lowsignal")
    (held,) = await _held_report(gated, repo, "Unsigned update channel")
    async with db.transaction() as session:  # its canonical under a coordinated-disclosure clock
        await session.execute(
            text("""
                INSERT INTO disclosures (canonical_finding_id, repository_id, reported_at, deadline)
                SELECT id, repository_id, now(), now() + interval '30 days' FROM canonical_findings
                WHERE public_id = CAST(:id AS uuid)
            """),
            {"id": held["canonical_public_id"]},
        )
    moderator = await make_account("mod", platform_role="moderator")
    outcome = await release_queue(moderator, "lowsignal", "reviewed the queue", NOTES)
    assert outcome.after == {"held": 0, "published": 0, "embargoed": 1}
    assert (await client.get(f"/findings/{held['public_id']}")).status_code == 404  # the clock still holds it
    async with db.read_session(replica=False) as session:
        reason = await session.execute(
            text("SELECT held_reason FROM scan_findings WHERE public_id = CAST(:id AS uuid)"), {"id": held["public_id"]}
        )
        assert reason.scalar_one() == "embargo"


async def test_the_openapi_document_lists_every_export_file(client: httpx.AsyncClient) -> None:
    paths = (await client.get("/api/v1/openapi.json")).json()["paths"]
    assert "precision.ndjson.gz" in FILE_NAMES
    for name in FILE_NAMES:
        assert "get" in paths[f"/exports/{name}"], name
