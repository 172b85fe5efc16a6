"""Set-up for the statement tests (no tests here): a public finding on a listed repository, and a verified maintainer
of that repository made through the claim service against the loopback forge."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from app.accounts.models import Account
from app.accounts.service import create_token
from app.maintainers import service
from app.registry.models import Repository
from app.reports.service import submit_report
from tests import factories
from tests.maintainers.support import Forge
from tests.reports.support import finding, report_body

SCOPE = "repositories:maintain"
TITLE = "Unvalidated redirect after login"


@dataclass(frozen=True)
class Published:
    repository: Repository
    submitter: Account
    report: dict[str, Any]

    @property
    def canonical(self) -> str:
        return str(self.report["findings"][0]["canonical_public_id"])

    @property
    def occurrence(self) -> str:
        return str(self.report["findings"][0]["public_id"])

    @property
    def slug(self) -> str:
        return f"{self.repository.host}/{self.repository.owner}/{self.repository.name}"


async def published(*, host: str = "github.com", titles: tuple[str, ...] = (TITLE,)) -> Published:
    """A listed repository with one public report of `titles`."""
    repository = await factories.create_repository(host=host)
    submitter = await factories.create_account()
    body = report_body(findings=[finding(title=t, file=f"src/{i}.py") for i, t in enumerate(titles)])
    report = await submit_report(submitter, repository.host, repository.owner, repository.name, body)
    return Published(repository, submitter, report)


async def verified_maintainer(forge: Forge, repository: Repository, **attributes: str) -> Account:
    """A new account that claimed the repository and committed its token: a verified maintainer."""
    account = await factories.create_account(**attributes)
    claim, _created = await service.claim_repository(account.id, repository.host, repository.owner, repository.name)
    forge.serve_file(repository.host, repository.owner, repository.name, f"# maintainers\n{claim.token}\n")
    verified = await service.verify_claim(account.id, claim.id)
    assert verified.state == "verified"
    return account


async def bearer(account: Account, *scopes: str) -> dict[str, str]:
    return {"Authorization": "Bearer " + await create_token(account.id, list(scopes or (SCOPE,)))}


def statements_url(canonical: str) -> str:
    return f"/api/v1/findings/{canonical}/statements"


async def state(client: httpx.AsyncClient, canonical: str, headers: dict[str, str], **body: Any) -> httpx.Response:
    return await client.post(statements_url(canonical), headers=headers, json=body)
