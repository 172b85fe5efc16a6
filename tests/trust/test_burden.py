"""The burden shown to maintainers (issue 38 item 5): a repository's page and twin say how many findings about it
were decided and how many of those were disputed or refused."""

from __future__ import annotations

import httpx

from tests import factories
from tests.sql import execute

_REFUSED = """
WITH r AS (INSERT INTO report_refusals (account_id, repository_id, reason) VALUES (:account, :repo, 'file_missing')
           RETURNING id)
INSERT INTO finding_outcomes (refusal_id, account_id, outcome, reason, decided_at)
SELECT r.id, :account, 'refused', 'refused at its commit', now() FROM r
"""
_DECIDED = """
INSERT INTO finding_outcomes (canonical_finding_id, account_id, outcome, reason, decided_at)
VALUES (:canonical, :account, :outcome, 'decided by reviewers', now())
"""


async def test_burden_counts_on_the_page_and_the_twin(client: httpx.AsyncClient) -> None:
    account = await factories.create_account()
    repo = await factories.create_repository("burdened", "app")
    other = await factories.create_repository("elsewhere", "app")
    for title, outcome in (("SQL injection in login", "disputed"), ("Open redirect in next", "verified")):
        _scan, canonical, _occurrence = await factories.create_instance(repo, account, title)
        await execute(_DECIDED, canonical=canonical.id, account=account.id, outcome=outcome)
    await execute(_REFUSED, account=account.id, repo=repo.id)
    await execute(_REFUSED, account=account.id, repo=other.id)  # another repository's burden

    twin = (await client.get("/repos/github.com/burdened/app.json")).json()
    assert twin["burden"] == {"decided": 3, "disputed": 1, "refused": 1}
    page = await client.get("/repos/github.com/burdened/app")
    assert "Of 3 findings decided here, 1 was disputed and 1 refused at its commit." in page.text
