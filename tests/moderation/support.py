"""Shared set-up for the moderation, session, CSRF and authorization tests (no tests here).

Accounts come from the real account service; sessions from the real session service. The session cookie is
`Secure` outside local development (the tests' BASE_URL is http://testserver), so httpx would not send it back
over http by itself: `act_as` puts the token in the client's jar explicitly, as a browser on https would.
"""

from __future__ import annotations

import httpx

from app.accounts.models import Account
from app.accounts.sessions import COOKIE_NAME, open_session
from app.registry.models import Repository
from app.reports.models import Scan
from tests import factories

SAME_ORIGIN = {"Origin": "http://testserver"}
HTMX = {**SAME_ORIGIN, "HX-Request": "true"}
PASSWORD = "correct horse battery staple"
NOTES = "Evidence: the report discloses a live credential of a third party."
TITLE = "SQL injection in login handler"


async def make_account(handle: str, *, password: str | None = None, **attributes: str) -> Account:
    """An active account `{handle}@example.com` (`attributes`: platform_role, trust_tier, state)."""
    return await factories.create_account(email=f"{handle}@example.com", handle=handle, password=password, **attributes)


async def agent_and_moderator() -> tuple[Account, Account]:
    """A member who reports (`agent`) and a moderator (`mod`)."""
    return await make_account("agent"), await make_account("mod", platform_role="moderator")


async def act_as(client: httpx.AsyncClient, account: Account | None) -> str | None:
    """Give the client a live session of `account` (None: anonymous)."""
    client.cookies.clear()
    if account is None:
        return None
    token = await open_session(account.id)
    client.cookies.set(COOKIE_NAME, token)
    return token


async def two_repository_pattern(submitter: Account, title: str = TITLE) -> tuple[list[Repository], list[Scan]]:
    """One pattern seen in two listed repositories, each through one public report."""
    repos: list[Repository] = []
    scans: list[Scan] = []
    for _ in range(2):
        repo = await factories.create_repository()
        scan, _canonical, _occurrence = await factories.create_instance(repo, submitter, title)
        repos.append(repo)
        scans.append(scan)
    return repos, scans
