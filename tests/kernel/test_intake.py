"""The one body step (app/kernel/intake.py, docs/security.md "Body budget"): every unsafe route goes through it,
refused submissions cost the token that sent them, a body past its processing budget is a 413 naming the limit,
and integer headers are read as ASCII digits only."""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from typing import Any

import httpx
import pytest

from app.accounts.models import Account
from app.kernel.intake import BodyRoute, require_json_counts
from app.kernel.limits import MAX_JSON_CONTAINERS, MAX_JSON_VALUES
from app.main import app
from app.registry.models import Repository
from tests import factories
from tests.reports.support import finding, report_body, row_counts
from tests.reports.test_reports_api import reports_url, token_for
from tests.reports.test_sarif_in import CODEQL
from tests.routes import flat_routes

UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}


async def _reporter(**account: str) -> tuple[Account, Repository, dict[str, str]]:
    """An active account (`account`: other attributes), a listed repository, and an API token's headers."""
    reporter = await factories.create_account(state="active", **account)
    return reporter, await factories.create_repository(), await token_for(reporter)


def test_every_route_with_an_unsafe_method_takes_its_body_through_the_intake() -> None:
    unsafe = [route for route in flat_routes() if set(route.methods or ()) & UNSAFE]
    assert (
        len(unsafe) >= 9
    )  # the report, check, confirmation and repository APIs, login, logout, three moderation forms
    assert [route.path for route in unsafe if not isinstance(route, BodyRoute)] == []


async def test_refused_submissions_cost_the_token_a_429_with_retry_after(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REFUSED_PER_MINUTE", "3")
    account, repo, headers = await _reporter()
    bad = report_body(findings=[finding(line_start=0)])
    for _ in range(3):
        refused = await client.post(reports_url(repo), headers=headers, json=bad)
        assert refused.status_code == 422
    spent = await client.post(reports_url(repo), headers=headers, json=report_body())
    assert spent.status_code == 429
    assert 1 <= int(spent.headers["Retry-After"]) <= 60
    assert "refused submissions a minute per API token" in spent.json()["errors"]["rate_limit"][0]
    assert (await row_counts())["scans"] == 0
    # the allowance is the token's: another token of the account still submits
    fresh = await client.post(reports_url(repo), headers=await token_for(account), json=report_body())
    assert fresh.status_code == 201, fresh.text


async def test_moderators_are_not_charged_for_refusals(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REFUSED_PER_MINUTE", "2")
    _, repo, headers = await _reporter(platform_role="moderator")
    for _ in range(4):
        refused = await client.post(reports_url(repo), headers=headers, json=report_body(commit_sha="nope"))
        assert refused.status_code == 422
    assert (await client.post(reports_url(repo), headers=headers, json=report_body())).status_code == 201


async def test_a_body_past_its_processing_budget_is_a_413_naming_the_limit(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BODY_BUDGET_SECONDS", "0.001")
    _, repo, headers = await _reporter()
    body = report_body(findings=[finding(title=f"finding {i}", description="d" * 5000) for i in range(200)])
    response = await client.post(reports_url(repo), headers=headers, json=body)
    assert response.status_code == 413
    assert "the per-request budget" in response.json()["errors"]["body"][0]
    assert (await row_counts())["scans"] == 0


async def _asgi(headers: list[tuple[bytes, bytes]], body: bytes) -> dict[str, Any]:
    """One request straight to the ASGI app (httpx would refuse the header first, as h11 does today)."""
    sent = False
    answer: dict[str, Any] = {}

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
        elif message["type"] == "http.response.body":
            answer["body"] = answer.get("body", b"") + message.get("body", b"")

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/v1/repositories",
        "raw_path": b"/api/v1/repositories",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver"), *headers],
        "client": ("203.0.113.7", 4711),
        "server": ("testserver", 80),
    }
    await app(scope, receive, send)
    return answer


async def test_integer_headers_are_ascii_digits_only() -> None:
    account = await factories.create_account(state="active")
    token = (await token_for(account, "repositories:write"))["Authorization"].encode()
    body = json.dumps({"host": "github.com", "owner": "acme", "name": "widget"}).encode()
    for length in ("²".encode(), "١٢".encode(), b"12\xff"):
        answer = await _asgi([(b"authorization", token), (b"content-length", length)], body)
        assert answer["status"] in (200, 201), answer


async def test_json_with_more_containers_than_the_parser_may_build_is_a_413(client: httpx.AsyncClient) -> None:
    _, repo, headers = await _reporter()
    headers["Content-Type"] = "application/json"
    nests = b"[" + b",".join([b"[]"] * (MAX_JSON_CONTAINERS + 1)) + b"]"
    body = b'{"commit_sha": "' + b"a" * 40 + b'", "document": {"findings": [], "meta": ' + nests + b"}}"
    response = await client.post(reports_url(repo), headers=headers, content=body)
    assert response.status_code == 413
    assert response.json()["errors"]["body"] == [f"must hold at most {MAX_JSON_CONTAINERS} JSON objects and arrays"]
    # brackets inside strings are text, not containers
    text_body = report_body(notes="[" * 300_000)
    response = await client.post(reports_url(repo), headers=headers, content=json.dumps(text_body))
    assert response.status_code != 413, response.text


def many_keys_report(keys: int) -> bytes:
    """Issue 34's body: a report near 4 MiB whose `document` is one object of `keys` keys (short distinct names,
    each with a 0), 9 bytes a member."""
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

    def name(i: int) -> str:
        text = ""
        while True:
            text, i = text + alphabet[i % 62], i // 62
            if not i:
                return text

    document = b"{" + ",".join(f'"{name(i)}":0' for i in range(keys)).encode() + b"}"
    return b'{"commit_sha":"' + b"a" * 40 + b'","model":"m","prompt_version":"v1","document":' + document + b"}"


async def test_json_with_more_values_than_the_parser_may_build_is_a_413_before_it_is_parsed(
    client: httpx.AsyncClient,
) -> None:
    """Issue 34: 465,943 keys in one object were parsed (a third of a second holding every thread) and only then
    refused, 422, for the document's length. Members are counted with the containers now, before parsing."""
    _, repo, headers = await _reporter()
    headers["Content-Type"] = "application/json"
    body = many_keys_report(465_943)
    assert len(body) <= 4 * 1024 * 1024
    response = await client.post(reports_url(repo), headers=headers, content=body)
    assert response.status_code == 413, response.text
    assert response.json()["errors"] == {"body": [f"must hold at most {MAX_JSON_VALUES} JSON values and member names"]}
    assert (await row_counts())["scans"] == 0
    # commas and colons inside strings are text, not members
    text_body = report_body(notes=",:" * 300_000)
    response = await client.post(reports_url(repo), headers=headers, content=json.dumps(text_body))
    assert response.status_code != 413, response.text


def scaled_codeql(size: int, **dumps: Any) -> bytes:
    """The suite's CodeQL log with its results repeated until it is just under `size` bytes."""
    log = json.loads(CODEQL.read_text())
    results = log["runs"][0]["results"]

    def dumped(copies: int) -> bytes:
        log["runs"][0]["results"] = results * copies
        return json.dumps(log, **dumps).encode()

    first, each = len(dumped(1)), len(dumped(2)) - len(dumped(1))  # the size grows by `each` a copy
    raw = dumped(1 + (size - first) // each)
    assert len(raw) <= size
    return raw


@pytest.mark.parametrize("dumps", [{"indent": 2}, {"separators": (",", ":")}], ids=["pretty", "compact"])
def test_a_sarif_log_at_the_body_limit_is_within_the_value_count(dumps: dict[str, Any]) -> None:
    """Legitimate large documents stay under the count: the CodeQL log scaled to 4 MiB holds about 193,000 values
    and member names pretty-printed and 381,000 compact (of 500,000)."""
    raw = scaled_codeql(4 * 1024 * 1024, **dumps)
    assert len(raw) > 4 * 1024 * 1024 - 20_000
    require_json_counts(raw)  # no 413
