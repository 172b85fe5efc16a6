"""CSRF by origin checks on unsafe methods, and the security headers on every response (errors included)."""

from __future__ import annotations

import httpx
import pytest

from app.accounts.sessions import COOKIE_NAME, load_session, open_session
from tests.moderation.support import NOTES, make_account, two_repository_pattern

HEADERS = ("content-security-policy", "x-content-type-options", "referrer-policy", "x-frame-options")


async def logged_in(client: httpx.AsyncClient) -> str:
    member = await make_account("member")
    token = await open_session(member.id)
    client.cookies.set(COOKIE_NAME, token)
    return token


def assert_security_headers(response: httpx.Response) -> None:
    for name in HEADERS:
        assert name in response.headers, name
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    assert "unsafe-inline" not in response.headers["content-security-policy"]


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Origin": "http://testserver.evil.example"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
        {},  # a cookie but no provenance at all: not a request our pages make
    ],
)
async def test_cross_origin_posts_with_a_cookie_are_refused(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    token = await logged_in(client)
    response = await client.post("/logout", headers=headers)
    assert response.status_code == 403
    assert "cross-origin POST refused" in response.text
    assert_security_headers(response)
    assert await load_session(token) is not None  # the forged logout did nothing


@pytest.mark.parametrize(
    "headers",
    [
        {"Sec-Fetch-Site": "same-origin"},
        {"Sec-Fetch-Site": "none"},
        {"Origin": "http://testserver"},  # BASE_URL's origin (and the request's own)
        {"Origin": "HTTP://TESTSERVER"},
    ],
)
async def test_same_origin_posts_pass(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    token = await logged_in(client)
    response = await client.post("/logout", headers=headers)
    assert response.status_code == 303
    assert await load_session(token) is None


async def test_the_requests_own_host_counts_as_same_origin(client: httpx.AsyncClient) -> None:
    token = await logged_in(client)
    response = await client.post(
        "/logout", headers={"Host": "tarakan.internal:8080", "Origin": "http://tarakan.internal:8080"}
    )
    assert response.status_code == 303
    assert await load_session(token) is None


async def test_bearer_calls_without_cookies_are_exempt_but_not_with_one(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/logout", headers={"Authorization": "Bearer some-token", "Origin": "https://evil.example"}
    )
    assert response.status_code == 303  # reached the route: API clients carry no ambient credential
    await logged_in(client)
    response = await client.post(
        "/logout", headers={"Authorization": "Bearer some-token", "Origin": "https://evil.example"}
    )
    assert response.status_code == 403


async def test_cookieless_scripts_without_provenance_pass(client: httpx.AsyncClient) -> None:
    response = await client.post("/login", data={"email": "x@example.com", "password": "nope"})
    assert response.status_code == 401  # reached the login route


async def test_a_cross_origin_moderation_post_changes_nothing(client: httpx.AsyncClient) -> None:
    moderator = await make_account("mod", platform_role="moderator")
    submitter = await make_account("agent")
    _repos, scans = await two_repository_pattern(submitter)
    client.cookies.set(COOKIE_NAME, await open_session(moderator.id))
    form = {"visibility": "restricted", "reason": "takedown", "notes": NOTES}
    forged = await client.post(
        f"/moderation/scans/{scans[0].id}/visibility", data=form, headers={"Origin": "https://evil.example"}
    )
    assert forged.status_code == 403
    audit = await client.get("/moderation/audit")
    assert "scan.visibility" not in audit.text
    same = await client.post(
        f"/moderation/scans/{scans[0].id}/visibility", data=form, headers={"Sec-Fetch-Site": "same-origin"}
    )
    assert same.status_code == 303


async def test_safe_methods_are_never_refused(client: httpx.AsyncClient) -> None:
    response = await client.get("/login", headers={"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
    assert response.status_code == 200


async def test_security_headers_on_pages_errors_and_refusals(client: httpx.AsyncClient) -> None:
    for response in (
        await client.get("/login"),
        await client.get("/no-such-page-at-all"),
        await client.get("/moderation"),
    ):
        assert_security_headers(response)
    assert (await client.get("/moderation")).headers["cache-control"] == "no-store"
    assert (await client.get("/login")).headers["cache-control"] == "no-store"
