"""`GET /api/v1/reports/{id}`: the report with each finding's evidence state now, for its submitter and privileged
viewers; 404 for anyone else (docs/domain.md "Evidence at the commit")."""

from __future__ import annotations

import httpx

from app.accounts.service import create_token
from app.reports.service import submit_report
from tests import factories
from tests.reports.support import report_body, reviewer


async def test_the_submitter_and_reviewers_read_a_report_and_nobody_else(client: httpx.AsyncClient) -> None:
    repo = await factories.create_repository()
    author = await factories.create_account()
    stored = await submit_report(author, repo.host, repo.owner, repo.name, report_body())

    async def get(account: object | None) -> httpx.Response:
        headers = {}
        if account is not None:
            headers["Authorization"] = f"Bearer {await create_token(account.id, ['findings:submit'])}"  # type: ignore[attr-defined]
        return await client.get(f"/api/v1/reports/{stored['id']}", headers=headers)

    mine = await get(author)
    assert mine.status_code == 200 and mine.headers["cache-control"] == "private, no-store"
    assert mine.json()["findings"] == stored["findings"]
    assert mine.json()["findings"][0]["evidence"]["state"] == "unchecked"  # EVIDENCE_CHECK=off in the suite
    assert (await get(await reviewer())).status_code == 200
    assert (await get(await factories.create_account())).status_code == 404
    assert (await get(None)).status_code == 401
    missing = await client.get(
        "/api/v1/reports/999999999",
        headers={"Authorization": f"Bearer {await create_token(author.id, ['findings:submit'])}"},
    )
    assert missing.status_code == 404
