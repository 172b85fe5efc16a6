"""A low-signal account's new finding is held off every public surface, with the reason in its report answer, until
a qualified reviewer's check releases it (docs/domain.md "Earned trust")."""

from __future__ import annotations

import httpx

from app.accounts.service import create_token
from app.reports.checks import record_check
from app.reports.service import submit_report
from tests import factories
from tests.evidence.test_publication import _everything, _published_entries
from tests.reports.support import check_body, finding, report_body, reviewer
from tests.trust.test_outcomes import _decided

TITLE = "Heap overflow in the held parser"


async def test_a_gated_accounts_finding_is_held_until_a_reviewer_checks_it(client: httpx.AsyncClient) -> None:
    repo = await factories.create_repository("heldco", "heldrepo")
    gated = await factories.create_account()
    await _decided(gated, verified=1, disputed=9)  # (1 + 2) / (10 + 4) = 0.21, under the floor of 0.3
    answer = await submit_report(gated, repo.host, repo.owner, repo.name, report_body([finding(title=TITLE)]))
    (held,) = answer["findings"]
    assert held["held"] == "low_signal"
    assert answer["disclosed"] is False

    assert (await client.get(f"/findings/{held['public_id']}")).status_code == 404
    assert TITLE not in await _everything(client)
    assert held["public_id"] not in await _published_entries(client)

    checker = await reviewer()
    token = await create_token(checker.id, ["findings:verify"])
    queue = (await client.get("/api/v1/review-queue", headers={"Authorization": f"Bearer {token}"})).json()
    assert [(i["public_id"], i["title"]) for i in queue["items"]] == [(held["public_id"], TITLE)]
    assert "reporter" not in queue["items"][0]  # a reporter's signal is theirs and the moderators'
    member = await factories.create_account()
    member_token = await create_token(member.id, ["findings:verify"])
    refused = await client.get("/api/v1/review-queue", headers={"Authorization": f"Bearer {member_token}"})
    assert refused.status_code == 403

    await record_check(checker, held["canonical_public_id"], check_body(verdict="disputed"))

    assert (await client.get(f"/findings/{held['public_id']}")).status_code == 200
    assert TITLE in await _everything(client)
    assert (await _published_entries(client)).count(held["public_id"]) == 1
    after = (await client.get("/api/v1/review-queue", headers={"Authorization": f"Bearer {token}"})).json()
    assert after["items"] == []


async def test_an_ungated_account_publishes_at_once(client: httpx.AsyncClient) -> None:
    repo = await factories.create_repository()
    fine = await factories.create_account()
    await _decided(fine, verified=9, disputed=1)
    answer = await submit_report(fine, repo.host, repo.owner, repo.name, report_body([finding(title=TITLE)]))
    assert "held" not in answer["findings"][0] or answer["findings"][0]["held"] is None
    assert (await client.get(f"/findings/{answer['findings'][0]['public_id']}")).status_code == 200
