"""Login, server-side sessions (rotation, revocation, expiry, throttled writes), rehash and the login rate limit."""

from __future__ import annotations

import hashlib
from typing import Any

import httpx
import pytest
from argon2 import PasswordHasher, Type
from sqlalchemy import text

from app.accounts import sessions
from app.accounts.passwords import verify_password
from app.accounts.sessions import COOKIE_NAME, load_session, open_session
from app.kernel import db
from tests.moderation.support import PASSWORD, SAME_ORIGIN, make_account


async def rows(sql: str, **params: Any) -> list[dict[str, Any]]:
    async with db.read_session(replica=False) as session:
        return [dict(r._mapping) for r in await session.execute(text(sql), params)]


async def execute(sql: str, **params: Any) -> None:
    async with db.transaction() as session:
        await session.execute(text(sql), params)


async def post_login(client: httpx.AsyncClient, email: str, password: str, **extra: str) -> httpx.Response:
    return await client.post("/login", data={"email": email, "password": password, **extra}, headers=SAME_ORIGIN)


def issued_token(response: httpx.Response) -> str:
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE_NAME}=")
    return cookie.split(";", 1)[0].split("=", 1)[1]


async def test_login_opens_a_server_side_session_with_a_hardened_cookie(client: httpx.AsyncClient) -> None:
    moderator = await make_account("mod", platform_role="moderator", password=PASSWORD)
    page = await client.get("/login")
    assert page.status_code == 200 and 'name="password"' in page.text
    assert page.headers["cache-control"] == "no-store"

    response = await post_login(client, "  MOD@example.com ", PASSWORD)

    assert response.status_code == 303 and response.headers["location"] == "/moderation"
    cookie = response.headers["set-cookie"]
    for attribute in ("HttpOnly", "SameSite=lax", "Path=/", "Secure"):
        assert attribute.lower() in cookie.lower()
    token = issued_token(response)
    [stored] = await rows("SELECT account_id, token_hash, expires_at - inserted_at AS lifetime FROM web_sessions")
    assert stored["account_id"] == moderator.id
    assert bytes(stored["token_hash"]) == hashlib.sha256(token.encode()).digest()  # never the token itself
    assert stored["lifetime"].days == 7
    loaded = await load_session(token)
    assert loaded is not None and loaded.id == moderator.id
    assert (await rows("SELECT last_seen_at FROM accounts WHERE id = :id", id=moderator.id))[0]["last_seen_at"]


async def test_login_goes_back_to_a_local_next_only(client: httpx.AsyncClient) -> None:
    await make_account("member", password=PASSWORD)
    back = await post_login(client, "member@example.com", PASSWORD, next="/moderation/audit?cursor=x")
    assert back.headers["location"] == "/moderation/audit?cursor=x"
    for hostile in ("//evil.example/", "https://evil.example/", "/\\evil.example"):
        response = await post_login(client, "member@example.com", PASSWORD, next=hostile)
        assert response.headers["location"] == "/"


async def test_login_rotates_the_presented_session(client: httpx.AsyncClient) -> None:
    member = await make_account("member", password=PASSWORD)
    old = await open_session(member.id)
    client.cookies.set(COOKIE_NAME, old)
    response = await post_login(client, "member@example.com", PASSWORD)
    new = issued_token(response)
    assert new != old
    assert await load_session(old) is None
    assert await load_session(new) is not None
    sessions = await rows("SELECT revoked_at FROM web_sessions ORDER BY id")
    assert [s["revoked_at"] is not None for s in sessions] == [True, False]


async def test_logout_revokes_the_session(client: httpx.AsyncClient) -> None:
    moderator = await make_account("mod", platform_role="moderator")
    token = await open_session(moderator.id)
    client.cookies.set(COOKIE_NAME, token)
    assert (await client.get("/moderation")).status_code == 200
    response = await client.post("/logout", headers=SAME_ORIGIN)
    assert response.status_code == 303
    assert f'{COOKIE_NAME}=""' in response.headers["set-cookie"] or "Max-Age=0" in response.headers["set-cookie"]
    assert await load_session(token) is None
    client.cookies.set(COOKIE_NAME, token)  # a copied cookie is dead too
    assert (await client.get("/moderation")).status_code == 303


async def test_sessions_expire_when_idle_or_old() -> None:
    member = await make_account("member")
    token = await open_session(member.id)
    await execute("UPDATE web_sessions SET last_seen_at = now() - interval '11 hours 50 minutes'")
    assert await load_session(token) is not None  # and that request counts as activity again
    await execute("UPDATE web_sessions SET last_seen_at = now() - interval '12 hours 1 minute'")
    assert await load_session(token) is None
    fresh = await open_session(member.id)
    await execute("UPDATE web_sessions SET expires_at = now() - interval '1 second' WHERE revoked_at IS NULL")
    assert await load_session(fresh) is None


async def test_last_seen_is_written_at_most_every_five_minutes() -> None:
    member = await make_account("member")
    token = await open_session(member.id)
    await load_session(token)
    [first] = await rows("SELECT last_seen_at FROM web_sessions")
    assert first["last_seen_at"] is not None
    await load_session(token)
    [second] = await rows("SELECT last_seen_at FROM web_sessions")
    assert second["last_seen_at"] == first["last_seen_at"]
    await execute("UPDATE web_sessions SET last_seen_at = now() - interval '6 minutes'")
    await load_session(token)
    [third] = await rows("SELECT last_seen_at > now() - interval '1 minute' AS recent FROM web_sessions")
    assert third["recent"]


async def test_account_last_seen_is_throttled_at_login(client: httpx.AsyncClient) -> None:
    member = await make_account("member", password=PASSWORD)
    await post_login(client, "member@example.com", PASSWORD)
    [first] = await rows("SELECT last_seen_at FROM accounts WHERE id = :id", id=member.id)
    await post_login(client, "member@example.com", PASSWORD)
    [second] = await rows("SELECT last_seen_at FROM accounts WHERE id = :id", id=member.id)
    assert first["last_seen_at"] is not None and second["last_seen_at"] == first["last_seen_at"]


async def test_an_outdated_hash_is_upgraded_at_login(client: httpx.AsyncClient) -> None:
    member = await make_account("member")
    weak = PasswordHasher(type=Type.ID, time_cost=1, memory_cost=8192, parallelism=1).hash(PASSWORD)
    await execute("UPDATE accounts SET password_hash = :h WHERE id = :id", h=weak, id=member.id)
    response = await post_login(client, "member@example.com", PASSWORD)
    assert response.status_code == 303
    [stored] = await rows("SELECT password_hash FROM accounts WHERE id = :id", id=member.id)
    assert stored["password_hash"] != weak
    assert verify_password(stored["password_hash"], PASSWORD) == (True, None)  # current parameters now


async def test_bad_credentials_get_one_generic_answer(client: httpx.AsyncClient) -> None:
    await make_account("member", password=PASSWORD)
    wrong = await post_login(client, "member@example.com", "not the password")
    unknown = await post_login(client, "ghost@example.com", PASSWORD)
    for response in (wrong, unknown):
        assert response.status_code == 401
        assert "Invalid email or password" in response.text
        assert "set-cookie" not in response.headers
    assert 'value="member@example.com"' in wrong.text  # what was typed is kept, the password is not
    assert "not the password" not in wrong.text
    assert len(await rows("SELECT * FROM login_attempts")) == 2
    assert await rows("SELECT * FROM web_sessions") == []
    missing = await post_login(client, "", "")
    assert missing.status_code == 422 and "email is required" in missing.text


async def test_a_locked_out_accounts_right_password_gets_the_wrong_password_answer(client: httpx.AsyncClient) -> None:
    for n, state in enumerate(("suspended", "banned")):
        await make_account(f"locked{n}", platform_role="moderator", state=state, password=PASSWORD)
        right = await post_login(client, f"locked{n}@example.com", PASSWORD)
        wrong = await post_login(client, f"locked{n}@example.com", "not the password")
        assert right.status_code == wrong.status_code == 401
        assert right.text == wrong.text and "Invalid email or password" in right.text
        assert "set-cookie" not in right.headers
    assert await rows("SELECT * FROM web_sessions") == []
    assert len(await rows("SELECT * FROM login_attempts")) == 4  # the right password counted as a failure too


async def test_five_failures_lock_the_account_for_a_while(client: httpx.AsyncClient) -> None:
    await make_account("member", password=PASSWORD)
    for _ in range(5):
        assert (await post_login(client, "member@example.com", "guess")).status_code == 401
    locked = await post_login(client, "member@example.com", PASSWORD)  # even the right password waits
    assert locked.status_code == 429
    assert 1 <= int(locked.headers["retry-after"]) <= 15 * 60
    assert "Too many failed logins for this account" in locked.text
    assert "try again in 15 minutes" in locked.text
    assert "set-cookie" not in locked.headers
    # the window slides: once the failures are older than 15 minutes the account may log in again
    await execute("UPDATE login_attempts SET attempted_at = now() - interval '16 minutes'")
    assert (await post_login(client, "member@example.com", PASSWORD)).status_code == 303


async def test_twenty_failures_from_one_address_throttle_that_address(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sessions, "THROTTLE_DELAY", 0.01)
    await make_account("member", password=PASSWORD)
    for i in range(20):
        assert (await post_login(client, f"guess{i}@example.com", "guess")).status_code == 401
    blocked = await post_login(client, "guess0@example.com", "guess")  # an email with a failure of its own
    assert blocked.status_code == 429
    assert "your address" in blocked.text
    assert 1 <= int(blocked.headers["retry-after"]) <= 15 * 60
    # an account without failures of its own from the address still logs in (docs/security.md)
    assert (await post_login(client, "member@example.com", PASSWORD)).status_code == 303
    other = httpx.ASGITransport(app=client._transport.app, client=("198.51.100.9", 1234))  # type: ignore[attr-defined]
    async with httpx.AsyncClient(transport=other, base_url="http://testserver") as elsewhere:
        assert (await post_login(elsewhere, "member@example.com", PASSWORD)).status_code == 303
