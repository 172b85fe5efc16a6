"""Hostile input at the edge (docs/security.md): every request has a body limit (413 through the one error path),
the site's forms have tight limits, path and query values carrying NUL or control characters are refused before
any route runs, integers are ASCII digits only, JSON bodies have a depth bound, and a database DataError (a missing
validation) is a logged 400, never a 500."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import httpx
import pytest
from sqlalchemy.exc import DataError
from starlette.requests import Request
from starlette.routing import Route

from app.accounts.service import create_token
from app.kernel.limits import MAX_JSON_DEPTH, SITE_BODY_LIMIT
from tests import factories
from tests.moderation.support import SAME_ORIGIN, act_as, make_account
from tests.sql import scalar

UNCLEAN = "must not contain NUL, control characters or unpaired surrogates"


async def _chunks(total: int) -> AsyncIterator[bytes]:
    sent = 0
    while sent < total:
        yield b"x" * 4096
        sent += 4096


async def test_a_declared_body_over_the_site_limit_is_413(client: httpx.AsyncClient) -> None:
    form = {**SAME_ORIGIN, "Content-Type": "application/x-www-form-urlencoded"}
    response = await client.post("/login", content=b"e" * (SITE_BODY_LIMIT + 1), headers=form)
    assert response.status_code == 413
    assert "text/html" in response.headers["content-type"]
    assert f"({SITE_BODY_LIMIT} bytes)" in response.text


async def test_a_streamed_body_over_the_limit_is_413_without_content_length(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/api/v1/repositories",
        content=_chunks(SITE_BODY_LIMIT * 100),
        headers={"Content-Type": "application/json"},
    )
    # the repository API reads at most its own 16 KiB; the streamed bytes are counted, not the header
    assert response.status_code in (401, 413)
    account = await factories.create_account(state="active")
    token = await create_token(account.id, ["repositories:write"])
    response = await client.post(
        "/api/v1/repositories", content=_chunks(SITE_BODY_LIMIT * 100), headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == 413
    assert response.json() == {"errors": {"body": ["must be at most 16384 bytes"]}}


async def test_the_login_form_refuses_file_parts_and_many_fields(client: httpx.AsyncClient) -> None:
    with_file = await client.post(
        "/login", data={"email": "a@example.com"}, files={"password": ("p.txt", b"secret")}, headers=SAME_ORIGIN
    )
    assert with_file.status_code == 400
    assert "Too many files" in with_file.text
    many = await client.post("/login", data={f"f{i}": "x" for i in range(9)}, headers=SAME_ORIGIN)
    assert many.status_code == 400
    assert "Too many fields" in many.text
    big = await client.post("/login", data={"email": "a" * 5000, "password": "x"}, headers=SAME_ORIGIN)
    assert big.status_code == 400
    assert "exceeded maximum size" in big.text


async def test_moderation_notes_with_nul_are_422_naming_the_field(client: httpx.AsyncClient) -> None:
    await act_as(client, await make_account("mod", platform_role="moderator"))
    repo = await factories.create_repository()
    before = await scalar("SELECT count(*) FROM audit_events")
    response = await client.post(
        f"/moderation/repos/{repo.host}/{repo.owner}/{repo.name}/listing",
        data={"listing_status": "delisted", "reason": "spam", "notes": "see\x00this"},
        headers=SAME_ORIGIN,
    )
    assert response.status_code == 422, response.text
    assert UNCLEAN in response.text
    assert await scalar("SELECT count(*) FROM audit_events") == before


@pytest.mark.parametrize("path", ["/search?q=%00", "/search.json?q=%00", "/search?q=a%01b"])
async def test_nul_in_a_query_value_is_400_naming_it(client: httpx.AsyncClient, path: str) -> None:
    response = await client.get(path)
    assert response.status_code == 400
    if ".json" in path:
        assert response.json() == {"errors": {"q": [UNCLEAN]}}
    else:
        assert "text/html" in response.headers["content-type"]


@pytest.mark.parametrize(
    "path",
    [
        "/repos/github.com/a%00/b",
        "/repos/github.com/a%00/b.json",
        "/repos/github.com/a%00/b/reports.atom",
        "/findings/%00",
        "/infestations/%1f.json",
    ],
)
async def test_nul_in_a_path_is_404(client: httpx.AsyncClient, path: str) -> None:
    response = await client.get(path)
    assert response.status_code == 404


async def test_unicode_digits_are_not_report_ids(client: httpx.AsyncClient) -> None:
    account = await factories.create_account(state="active", trust_tier="reviewer")
    token = await create_token(account.id, ["findings:verify"])
    response = await client.post(
        "/api/v1/reports/²/confirmations",
        json={"verdict": "confirmed", "notes": "x" * 30},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code == 404
    assert response.json() == {"errors": {"report": ["not found"]}}


async def test_unicode_digits_in_recorded_are_ignored_by_the_console(client: httpx.AsyncClient) -> None:
    await act_as(client, await make_account("mod", platform_role="moderator"))
    response = await client.get("/moderation?recorded=²")
    assert response.status_code == 200
    assert 'class="flash"' not in response.text


@pytest.mark.parametrize("url", ["/api/v1/repositories", "/api/v1/repos/github.com/acme/widget/reports"])
async def test_deeply_nested_json_is_400(client: httpx.AsyncClient, url: str) -> None:
    account = await factories.create_account(state="active")
    token = await create_token(account.id, ["repositories:write", "findings:submit"])
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    message = {"errors": {"body": [f"must be nested at most {MAX_JSON_DEPTH} levels deep"]}}
    for depth in (MAX_JSON_DEPTH + 1, 3000):  # past the bound; past the parser's own recursion limit
        body = ("[" * depth + "]" * depth) if depth > 100 else ('{"a":' * depth + "1" + "}" * depth)
        response = await client.post(url, content=body.encode(), headers=headers)
        assert response.status_code == 400, (depth, response.text)
        assert response.json() == message


async def test_a_database_data_error_is_a_logged_400(caplog: pytest.LogCaptureFixture) -> None:
    from app.main import create_app

    async def refused(request: Request) -> None:
        raise DataError("INSERT ...", {}, Exception("PostgreSQL text fields cannot contain NUL (0x00) bytes"))

    app = create_app()
    app.router.routes.append(Route("/api/v1/refused", refused))
    transport = httpx.ASGITransport(app=app)
    with caplog.at_level(logging.ERROR):
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            response = await c.get("/api/v1/refused")
    assert response.status_code == 400
    assert response.json() == {"errors": {"request": ["contains a value the registry cannot store"]}}
    assert any("a validation is missing" in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)
