"""Accounts: argon2id passwords, account creation rules, and the shared application secret."""

from __future__ import annotations

import asyncio
import hashlib
import hmac

import pytest
from argon2 import PasswordHasher, Type
from sqlalchemy import func, select, text

from app.accounts.models import Account
from app.accounts.passwords import hash_password, verify_password
from app.accounts.service import create_account, get_account_by_email, get_account_by_handle
from app.kernel import db
from app.kernel.errors import ValidationError
from app.ops import secrets as app_secrets
from app.ops.models import AppSecret


async def account_count() -> int:
    async with db.read_session(replica=False) as session:
        return int((await session.execute(select(func.count()).select_from(Account))).scalar_one())


# --- passwords ---------------------------------------------------------------------------------------------


def test_hash_is_argon2id_and_verifies_only_the_right_password() -> None:
    stored = hash_password("correct horse battery staple")
    assert stored.startswith("$argon2id$")
    assert verify_password(stored, "correct horse battery staple") == (True, None)
    assert verify_password(stored, "correct horse battery stapler") == (False, None)
    assert hash_password("correct horse battery staple") != stored  # salted


def test_outdated_parameters_yield_a_new_hash_on_successful_verify() -> None:
    weak = PasswordHasher(time_cost=1, memory_cost=8192, parallelism=1, type=Type.ID).hash("old-params-password")
    ok, new_hash = verify_password(weak, "old-params-password")
    assert ok is True
    assert new_hash is not None and new_hash != weak
    assert verify_password(new_hash, "old-params-password") == (True, None)
    # a wrong password never produces a rehash
    assert verify_password(weak, "not-the-password") == (False, None)


def test_garbage_hash_is_a_mismatch_not_a_crash() -> None:
    assert verify_password("not-a-hash", "whatever-password") == (False, None)


# --- create_account -----------------------------------------------------------------------------------------


async def test_create_account_normalizes_and_hashes() -> None:
    account = await create_account("  Alice@Example.COM ", "Alice_01", password="a-long-password-1")
    assert (account.email, account.handle) == ("alice@example.com", "alice_01")
    assert (account.platform_role, account.trust_tier, account.state) == ("member", "new", "probation")
    assert account.password_hash is not None
    assert verify_password(account.password_hash, "a-long-password-1")[0]

    found = await get_account_by_email("ALICE@example.com ")
    assert found is not None and found.id == account.id
    by_handle = await get_account_by_handle("ALICE_01")
    assert by_handle is not None and by_handle.id == account.id


async def test_create_account_without_password_stores_none() -> None:
    account = await create_account("bot@example.com", "agent-bot", platform_role="admin", state="active")
    assert account.password_hash is None
    assert (account.platform_role, account.state) == ("admin", "active")


@pytest.mark.parametrize(
    ("kwargs", "field", "fragment"),
    [
        ({"email": "not-an-email"}, "email", "valid email"),
        ({"email": "   "}, "email", "required"),
        ({"email": "a@" + "x" * 250 + ".com"}, "email", "at most 254"),
        ({"handle": "a"}, "handle", "2-39"),
        ({"handle": "-dash"}, "handle", "2-39"),
        ({"handle": "has space"}, "handle", "2-39"),
        ({"handle": "x" * 40}, "handle", "2-39"),
        ({"handle": "Infestations"}, "handle", "reserved"),
        ({"handle": "admin"}, "handle", "reserved"),
        ({"handle": "login"}, "handle", "reserved"),
        ({"password": "short-pw"}, "password", "at least 12"),
        ({"platform_role": "owner"}, "platform_role", "member, moderator, admin"),
        ({"trust_tier": "gold"}, "trust_tier", "new, contributor, reviewer"),
        ({"state": "deleted"}, "state", "probation"),
    ],
)
async def test_invalid_account_names_the_field_and_writes_nothing(
    kwargs: dict[str, str], field: str, fragment: str
) -> None:
    args: dict[str, str] = {"email": "valid@example.com", "handle": "valid-handle", **kwargs}
    email, handle = args.pop("email"), args.pop("handle")
    with pytest.raises(ValidationError) as info:
        await create_account(email, handle, **args)
    assert list(info.value.errors) == [field]
    assert fragment in info.value.errors[field][0]
    assert await account_count() == 0


async def test_several_bad_fields_are_reported_together() -> None:
    with pytest.raises(ValidationError) as info:
        await create_account("nope", "x", password="short")
    assert set(info.value.errors) == {"email", "handle", "password"}


async def test_duplicate_email_and_handle_are_rejected_case_insensitively() -> None:
    await create_account("dup@example.com", "dup")
    with pytest.raises(ValidationError) as info:
        await create_account("DUP@Example.com", "other")
    assert info.value.errors == {"email": ["is already registered"]}
    with pytest.raises(ValidationError) as info:
        await create_account("other@example.com", "DUP")
    assert info.value.errors == {"handle": ["is already taken"]}
    assert await account_count() == 1


async def test_concurrent_creates_of_one_email_make_one_account() -> None:
    results = await asyncio.gather(
        *(create_account("race@example.com", f"racer{i}") for i in range(4)), return_exceptions=True
    )
    created = [r for r in results if isinstance(r, Account)]
    refused = [r for r in results if isinstance(r, ValidationError)]
    assert len(created) == 1 and len(refused) == 3
    assert all(r.errors == {"email": ["is already registered"]} for r in refused)
    assert await account_count() == 1


# --- application secret ----------------------------------------------------------------------------------------


async def test_configured_secret_key_is_used_verbatim(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SECRET_KEY", "configured-secret")
    assert await app_secrets.secret_key() == b"configured-secret"
    expected = hmac.new(b"configured-secret", b"client-ip:198.51.100.4", hashlib.sha256).digest()
    assert await app_secrets.client_ip_hash("198.51.100.4") == expected
    assert await app_secrets.client_ip_hash(None) is None
    assert await app_secrets.client_ip_hash("") is None
    async with db.read_session(replica=False) as session:  # nothing stored when configured
        assert (await session.execute(select(func.count()).select_from(AppSecret))).scalar_one() == 0


async def test_generated_secret_is_shared_by_instances_booting_together(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SECRET_KEY")
    app_secrets.forget_cached_secret()
    try:
        # several processes starting at once: each races the insert, all must read the winner's value
        keys = await asyncio.gather(*(app_secrets._load_or_create() for _ in range(6)))
        assert len(set(keys)) == 1 and len(keys[0]) >= 32
        async with db.read_session(replica=False) as session:
            rows = (await session.execute(text("SELECT name, value FROM app_secrets"))).all()
        assert [(name, value.encode()) for name, value in rows] == [("secret_key", keys[0])]

        # a later boot (empty cache) finds the same key, and the HMAC uses it
        assert await app_secrets.secret_key() == keys[0]
        ip_hash = await app_secrets.client_ip_hash("203.0.113.9")
        assert ip_hash == hmac.new(keys[0], b"client-ip:203.0.113.9", hashlib.sha256).digest()
        assert ip_hash != await app_secrets.client_ip_hash("203.0.113.10")
    finally:
        app_secrets.forget_cached_secret()
