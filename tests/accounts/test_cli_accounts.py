"""`tarakan accounts|tokens|repos` end to end, as real processes (the CLI runs its own event loop)."""

from __future__ import annotations

import json
import re

from app.accounts.passwords import verify_password
from app.accounts.service import authenticate_bearer, get_account_by_email
from app.registry.service import get_repository
from tests import factories
from tests.harness import assert_one_line_error, tarakan


async def test_accounts_create_prints_json_and_stores_the_password() -> None:
    result = await tarakan(
        "accounts",
        "create",
        "Mod@Example.com",
        "--handle",
        "Moddy",
        "--role",
        "moderator",
        "--trust-tier",
        "reviewer",
        "--state",
        "active",
        "--password-stdin",
        stdin="a-very-long-password\n",
    )
    assert result.code == 0, result.err
    printed = json.loads(result.out)
    assert {k: printed[k] for k in ("email", "handle", "platform_role", "trust_tier", "state")} == {
        "email": "mod@example.com",
        "handle": "moddy",
        "platform_role": "moderator",
        "trust_tier": "reviewer",
        "state": "active",
    }
    account = await get_account_by_email("mod@example.com")
    assert account is not None and account.id == printed["id"]
    assert account.password_hash is not None
    assert verify_password(account.password_hash, "a-very-long-password") == (True, None)


async def test_accounts_create_errors_are_one_line_exit_1() -> None:
    assert_one_line_error(
        await tarakan("accounts", "create", "x@example.com", "--handle", "api"), "handle: is reserved"
    )
    assert_one_line_error(
        await tarakan("accounts", "create", "x@example.com", "--handle", "okay", "--role", "owner"), "platform_role"
    )
    assert_one_line_error(
        await tarakan("accounts", "create", "x@example.com", "--handle", "okay", "--password-stdin", stdin="short\n"),
        "password: must be at least 12 characters",
    )
    assert await get_account_by_email("x@example.com") is None


async def test_tokens_create_prints_the_token_alone_on_the_last_line() -> None:
    account = await factories.create_account(email="agent@example.com")
    result = await tarakan("tokens", "create", "Agent@example.com", "--scopes", "findings:submit,repositories:write")
    assert result.code == 0, result.err
    last = result.out.rstrip("\n").splitlines()[-1]
    assert re.fullmatch(r"tk_[A-Za-z0-9_-]{40}", last)
    found, scopes = await authenticate_bearer(f"Bearer {last}")
    assert found.id == account.id
    assert scopes == frozenset({"findings:submit", "repositories:write"})


async def test_tokens_create_errors() -> None:
    assert_one_line_error(
        await tarakan("tokens", "create", "nobody@example.com", "--scopes", "findings:submit"), "email"
    )
    await factories.create_account(email="agent@example.com")
    assert_one_line_error(
        await tarakan("tokens", "create", "agent@example.com", "--scopes", "everything"), "unknown scope 'everything'"
    )


async def test_repos_add_then_add_again_then_delete_as_moderator() -> None:
    added = await tarakan("repos", "add", "GitHub.com/Acme/Widget", "--listing", "pending")
    assert added.code == 0, added.err
    body = json.loads(added.out)
    assert (body["host"], body["owner"], body["name"], body["listing_status"], body["created"]) == (
        "github.com",
        "acme",
        "widget",
        "pending",
        True,
    )
    again = await tarakan("repos", "add", "github.com/acme/widget")
    assert again.code == 0 and json.loads(again.out)["created"] is False
    assert json.loads(again.out)["listing_status"] == "pending"  # unchanged

    await factories.create_account(email="member@example.com")
    assert_one_line_error(
        await tarakan("repos", "delete", "github.com/acme/widget", "--as", "member@example.com"), "actor"
    )
    assert await get_repository("github.com", "acme", "widget") is not None

    await factories.create_account(email="mod@example.com", platform_role="moderator")
    deleted = await tarakan("repos", "delete", "github.com/acme/widget", "--as", "mod@example.com")
    assert deleted.code == 0, deleted.err
    assert await get_repository("github.com", "acme", "widget") is None


async def test_repos_add_rejects_bad_references() -> None:
    assert_one_line_error(await tarakan("repos", "add", "acme/widget"), "repository: must be HOST/OWNER/NAME")
    assert_one_line_error(await tarakan("repos", "add", "example.com/acme/widget"), "host: must be one of")
    assert_one_line_error(await tarakan("repos", "add", "github.com/acme/widget", "--listing", "hidden"), "listing")
