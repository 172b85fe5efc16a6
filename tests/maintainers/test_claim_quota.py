"""A daily quota of new claims per account (issue 34, docs/domain.md "Maintainers"): by standing, moderators exempt,
past it a 429 naming the quota with Retry-After and nothing written; answering an existing pending claim is no new
claim."""

from __future__ import annotations

import httpx

from app.maintainers.service import CLAIMS_PER_DAY
from app.registry.models import Repository
from tests import factories
from tests.maintainers.statement_support import bearer
from tests.sql import scalar


def claims_url(repo: Repository) -> str:
    return f"/api/v1/repos/{repo.host}/{repo.owner}/{repo.name}/claims"


async def test_new_claims_stop_at_the_daily_quota(client: httpx.AsyncClient) -> None:
    newcomer = await factories.create_account(state="probation")
    headers = await bearer(newcomer)
    repos = [await factories.create_repository() for _ in range(CLAIMS_PER_DAY.other + 1)]
    for repo in repos[:-1]:
        assert (await client.post(claims_url(repo), headers=headers)).status_code == 201
    refused = await client.post(claims_url(repos[-1]), headers=headers)
    assert refused.status_code == 429, refused.text
    assert refused.json()["errors"]["rate_limit"] == [
        f"daily quota of {CLAIMS_PER_DAY.other} maintainer claims reached"
    ]
    assert int(refused.headers["Retry-After"]) == 86400
    assert await scalar("SELECT count(*) FROM maintainer_claims") == CLAIMS_PER_DAY.other
    # a claim it already has is answered as it is
    assert (await client.post(claims_url(repos[0]), headers=headers)).status_code == 200
    # an active account has a larger quota; moderators have none
    active = await bearer(await factories.create_account())
    assert (await client.post(claims_url(repos[-1]), headers=active)).status_code == 201
    moderator = await bearer(await factories.create_account(platform_role="moderator"))
    more = [await factories.create_repository() for _ in range(CLAIMS_PER_DAY.reviewer)]
    for repo in [*repos, *more]:
        assert (await client.post(claims_url(repo), headers=moderator)).status_code == 201
