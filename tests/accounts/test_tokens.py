"""API tokens: issue once, store hashed, authenticate bearer headers, throttle last_used_at, scopes."""

from __future__ import annotations

import asyncio
import hashlib
import re
from datetime import datetime, timedelta

import pytest
from sqlalchemy import func, select, text

from app.accounts.models import ApiToken
from app.accounts.service import authenticate_bearer, create_token, require_scope, revoke_token
from app.kernel import db
from app.kernel.errors import Forbidden, NotFound, Unauthorized, ValidationError
from tests import factories
from tests.statements import statements_sent


async def token_row(secret: str) -> tuple[int, datetime | None, str]:
    """(id, last_used_at, xmin) of the token's row; xmin changes whenever the row is written."""
    async with db.read_session(replica=False) as session:
        row = (
            await session.execute(
                text("SELECT id, last_used_at, xmin::text FROM api_tokens WHERE token_hash = :h"),
                {"h": hashlib.sha256(secret.encode()).digest()},
            )
        ).one()
    return int(row[0]), row[1], str(row[2])


async def test_token_is_shown_once_and_stored_only_as_a_hash() -> None:
    account = await factories.create_account()
    secret = await create_token(account.id, ["findings:submit", " repositories:write", "findings:submit"])
    assert re.fullmatch(r"tk_[A-Za-z0-9_-]{40}", secret)
    async with db.read_session(replica=False) as session:
        token = (await session.execute(select(ApiToken))).scalar_one()
        session.expunge(token)
    assert token.token_hash == hashlib.sha256(secret.encode()).digest()
    assert token.token_prefix == secret[:8]
    assert sorted(token.scopes) == ["findings:submit", "repositories:write"]
    assert token.last_used_at is None and token.revoked_at is None
    assert secret not in repr((token.token_hash, token.token_prefix, token.scopes))
    assert await create_token(account.id, ["findings:submit"]) != secret


@pytest.mark.parametrize("scopes", [[], [" "], ["findings:submit", "admin:everything"], ["FINDINGS:SUBMIT"]])
async def test_invalid_scopes_name_the_field_and_write_nothing(scopes: list[str]) -> None:
    account = await factories.create_account()
    with pytest.raises(ValidationError) as info:
        await create_token(account.id, scopes)
    assert list(info.value.errors) == ["scopes"]
    async with db.read_session(replica=False) as session:
        assert (await session.execute(select(func.count()).select_from(ApiToken))).scalar_one() == 0


async def test_token_for_missing_account_is_not_found() -> None:
    with pytest.raises(NotFound):
        await create_token(999_999, ["findings:submit"])


async def test_bearer_header_authenticates_account_and_scopes() -> None:
    account = await factories.create_account(handle="agent-smith")
    secret = await create_token(account.id, ["findings:submit", "findings:verify"])
    found, scopes = await authenticate_bearer(f"Bearer {secret}")
    assert found.id == account.id and found.handle == "agent-smith"
    assert scopes == frozenset({"findings:submit", "findings:verify"})
    # the scheme is case-insensitive and surrounding spaces are tolerated
    found_again, _ = await authenticate_bearer(f"  bearer   {secret} ")
    assert found_again.id == account.id


@pytest.mark.parametrize(
    "header",
    [None, "", "   ", "Basic dXNlcjpwYXNz", "Bearer", "Bearer not-a-token", "Token tk_" + "a" * 40, "Bearer tk_short"],
)
async def test_missing_or_malformed_header_is_unauthorized(header: str | None) -> None:
    with pytest.raises(Unauthorized) as info:
        await authenticate_bearer(header)
    assert list(info.value.errors) == ["authorization"]


async def test_unknown_token_is_unauthorized() -> None:
    with pytest.raises(Unauthorized) as info:
        await authenticate_bearer("Bearer tk_" + "A" * 40)
    assert info.value.errors == {"authorization": ["is not a valid API token"]}


async def test_revoked_token_is_unauthorized_and_others_keep_working() -> None:
    account = await factories.create_account()
    revoked = await create_token(account.id, ["findings:submit"])
    kept = await create_token(account.id, ["findings:submit"])
    assert await revoke_token(account.id, revoked[:8]) == 1
    with pytest.raises(Unauthorized) as info:
        await authenticate_bearer(f"Bearer {revoked}")
    assert info.value.errors == {"authorization": ["this API token has been revoked"]}
    assert (await token_row(revoked))[1] is None  # a refused token is not "used"
    assert (await authenticate_bearer(f"Bearer {kept}"))[0].id == account.id


@pytest.mark.parametrize("state", ["suspended", "banned"])
async def test_suspended_or_banned_account_is_forbidden(state: str) -> None:
    account = await factories.create_account(state=state)
    secret = await create_token(account.id, ["findings:submit"])
    with pytest.raises(Forbidden) as info:
        await authenticate_bearer(f"Bearer {secret}")
    assert info.value.errors == {"account": [f"is {state}"]}
    _, last_used_at, _ = await token_row(secret)
    assert last_used_at is None  # a refused token is not "used"


@pytest.mark.parametrize("state", ["probation", "active", "restricted"])
async def test_other_states_authenticate(state: str) -> None:
    account = await factories.create_account(state=state)
    secret = await create_token(account.id, ["findings:submit"])
    assert (await authenticate_bearer(f"Bearer {secret}"))[0].state == state


async def test_last_used_at_is_written_at_most_once_per_five_minutes() -> None:
    account = await factories.create_account()
    secret = await create_token(account.id, ["findings:submit"])
    token_id, last_used_at, _ = await token_row(secret)
    assert last_used_at is None

    with statements_sent() as statements:  # the lookup and the write in one statement (run on every request)
        await authenticate_bearer(f"Bearer {secret}")
    assert len(statements) == 1, statements
    _, first_use, xmin_after_first = await token_row(secret)
    assert first_use is not None

    # many requests inside the 5 minutes, some concurrent: the row is not written again at all
    for _ in range(3):
        await authenticate_bearer(f"Bearer {secret}")
    await asyncio.gather(*(authenticate_bearer(f"Bearer {secret}") for _ in range(8)))
    _, still_first, xmin_now = await token_row(secret)
    assert still_first == first_use
    assert xmin_now == xmin_after_first

    # once the last write is older than 5 minutes, the next request records the use again
    async with db.transaction() as session:
        await session.execute(
            text("UPDATE api_tokens SET last_used_at = now() - interval '6 minutes' WHERE id = :id"), {"id": token_id}
        )
    _, aged, _ = await token_row(secret)
    await authenticate_bearer(f"Bearer {secret}")
    _, refreshed, _ = await token_row(secret)
    assert aged is not None and refreshed is not None
    assert refreshed - aged >= timedelta(minutes=5)


def test_require_scope_names_the_missing_scope() -> None:
    require_scope(frozenset({"findings:submit"}), "repositories:write", "findings:submit")
    with pytest.raises(Forbidden) as info:
        require_scope(frozenset({"findings:verify"}), "repositories:write", "findings:submit")
    assert info.value.errors == {"scope": ["this API token needs the scope repositories:write or findings:submit"]}
