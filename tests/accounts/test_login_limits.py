"""Hostile logins (docs/security.md): malformed emails refused before hashing, attempts stored by keyed hashes,
IPv6 grouped by /64, the per-account limit per address (no lockout of the owner), bounded password hashing."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.accounts import passwords, sessions
from app.accounts.sessions import LoginFailed, login
from app.kernel import db
from app.kernel.errors import RateLimited, ServiceUnavailable
from app.ops.secrets import client_address, client_ip_hash
from tests.moderation.support import PASSWORD, SAME_ORIGIN, make_account


async def rows(sql: str, **params: Any) -> list[dict[str, Any]]:
    async with db.read_session(replica=False) as session:
        return [dict(r._mapping) for r in await session.execute(text(sql), params)]


def from_address(client: httpx.AsyncClient, ip: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=client._transport.app, client=(ip, 1234))  # type: ignore[attr-defined]
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


async def post_login(client: httpx.AsyncClient, email: str, password: str) -> httpx.Response:
    return await client.post("/login", data={"email": email, "password": password}, headers=SAME_ORIGIN)


class HashProbe:
    """Wraps the real argon2 verification: counts calls and the most running at once (in threads)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.real = passwords.verify_password
        self.delay = delay
        self.calls = 0
        self.running = 0
        self.most = 0
        self.lock = threading.Lock()

    def __call__(self, password_hash: str, password: str) -> tuple[bool, str | None]:
        with self.lock:
            self.calls += 1
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            time.sleep(self.delay)  # holds the slot long enough for the others to queue
            return self.real(password_hash, password)
        finally:
            with self.lock:
                self.running -= 1


@pytest.fixture(autouse=True)
def short_throttle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessions, "THROTTLE_DELAY", 0.05, raising=False)


async def failures_from(ip: str, emails: list[str]) -> None:
    """One failed attempt per email from `ip`, stored as `login` stores them."""
    ip_hash = await client_ip_hash(ip)
    async with db.transaction() as session:
        for email in emails:
            await session.execute(
                text("INSERT INTO login_attempts (email_hash, ip_hash) VALUES (:e, :ip)"),
                {"e": await sessions.email_key(email), "ip": ip_hash},
            )


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> Iterator[HashProbe]:
    wrapper = HashProbe()
    monkeypatch.setattr(passwords, "verify_password", wrapper)
    yield wrapper


@pytest.mark.parametrize(
    "email",
    ["a" * 3000 + "@example.com", "\x00", "member@example.com\x00", "not an email", "member@@example.com"],
)
async def test_malformed_or_overlong_emails_get_the_wrong_password_answer_without_hashing(
    client: httpx.AsyncClient, probe: HashProbe, email: str
) -> None:
    await make_account("member", password=PASSWORD)
    response = await post_login(client, email, PASSWORD)
    assert response.status_code == 401
    assert "Invalid email or password" in response.text
    assert probe.calls == 0
    assert len(await rows("SELECT id FROM login_attempts")) == 1  # counted against the address


async def test_an_overlong_password_is_refused_without_hashing(client: httpx.AsyncClient, probe: HashProbe) -> None:
    await make_account("member", password=PASSWORD)
    response = await post_login(client, "member@example.com", "p" * 1025)
    assert response.status_code == 401 and probe.calls == 0


async def test_malformed_emails_count_toward_the_address_limit(client: httpx.AsyncClient) -> None:
    for i in range(20):
        assert (await post_login(client, "x" * (100 + i) + "\x00", "guess")).status_code == 401
    blocked = await post_login(client, "x" * 100 + "\x00", "guess")
    assert blocked.status_code == 429 and "your address" in blocked.text


async def test_a_lone_surrogate_in_the_email_is_a_failed_login() -> None:
    with pytest.raises(LoginFailed):
        await login("\ud800@example.com", PASSWORD, client_ip="203.0.113.7", presented_token=None)


async def test_attempts_are_stored_by_keyed_hashes_not_the_email(client: httpx.AsyncClient) -> None:
    await post_login(client, "someone@example.com", "guess")
    [row] = await rows("SELECT * FROM login_attempts")
    assert set(row) == {"id", "email_hash", "ip_hash", "attempted_at"}
    assert len(row["email_hash"]) == 32 and len(row["ip_hash"]) == 32
    assert b"someone" not in row["email_hash"]
    assert row["email_hash"] == await sessions.email_key("someone@example.com")


def test_ipv6_addresses_are_grouped_by_their_64() -> None:
    assert client_address("2001:db8:0:0:1::5") == client_address("2001:db8::ffff:ffff") == "2001:db8::/64"
    assert client_address("2001:db8:0:1::5") == "2001:db8:0:1::/64"
    assert client_address("::ffff:198.51.100.9") == "198.51.100.9"
    assert client_address("198.51.100.9") == "198.51.100.9"
    assert client_address(None) == "unknown"
    assert client_address("testclient") == "testclient"


async def test_rotating_addresses_inside_one_ipv6_64_shares_one_address_limit(client: httpx.AsyncClient) -> None:
    await make_account("member", password=PASSWORD)
    for i in range(20):
        async with from_address(client, f"2001:db8::{i + 1:x}") as rotating:
            assert (await post_login(rotating, f"guess{i}@example.com", "guess")).status_code == 401
    async with from_address(client, "2001:db8::abcd:1") as same_prefix:
        assert (await post_login(same_prefix, "guess0@example.com", "guess")).status_code == 429
    async with from_address(client, "2001:db8:0:1::1") as next_prefix:
        assert (await post_login(next_prefix, "guess0@example.com", "guess")).status_code == 401
        assert (await post_login(next_prefix, "member@example.com", PASSWORD)).status_code == 303


async def test_a_stranger_who_knows_the_email_cannot_lock_the_owner_out(client: httpx.AsyncClient) -> None:
    await make_account("mod", platform_role="moderator", password=PASSWORD)
    for _ in range(5):
        assert (await post_login(client, "mod@example.com", "guess")).status_code == 401
    stranger = await post_login(client, "mod@example.com", PASSWORD)
    assert stranger.status_code == 429 and "this account from your address" in stranger.text
    async with from_address(client, "198.51.100.20") as owner:
        assert (await post_login(owner, "mod@example.com", PASSWORD)).status_code == 303
    # the owner's success clears nothing of the stranger's failures
    assert (await post_login(client, "mod@example.com", PASSWORD)).status_code == 429


async def test_parallel_guesses_cannot_slip_under_the_account_limit() -> None:
    await make_account("member", password=PASSWORD)
    results = await asyncio.gather(
        *(login("member@example.com", "guess", client_ip="203.0.113.7", presented_token=None) for _ in range(9)),
        return_exceptions=True,
    )
    assert sorted(type(r).__name__ for r in results) == ["LoginFailed"] * 5 + ["RateLimited"] * 4
    assert len(await rows("SELECT id FROM login_attempts")) == 5


async def test_password_hashing_runs_at_most_hash_concurrency_at_a_time(probe: HashProbe) -> None:
    probe.delay = 0.05
    await make_account("member", password=PASSWORD)
    results = await asyncio.gather(
        *(login("member@example.com", PASSWORD, client_ip=f"198.51.100.{i}", presented_token=None) for i in range(8)),
        return_exceptions=True,
    )
    assert [r for r in results if isinstance(r, BaseException)] == []
    assert probe.calls == 8
    assert probe.most == passwords.HASH_CONCURRENCY


async def test_logins_past_the_hashing_queue_are_shed_with_503_and_not_counted(
    probe: HashProbe, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe.delay = 0.2
    monkeypatch.setattr(passwords, "HASH_QUEUE", 1)
    await make_account("member", password=PASSWORD)
    results = await asyncio.gather(
        *(login("member@example.com", "guess", client_ip=f"198.51.100.{i}", presented_token=None) for i in range(5)),
        return_exceptions=True,
    )
    shed = [r for r in results if isinstance(r, ServiceUnavailable)]
    failed = [r for r in results if isinstance(r, LoginFailed)]
    assert len(failed) == passwords.HASH_CONCURRENCY + 1 and len(shed) == 5 - len(failed)
    assert all(r.retry_after == passwords.HASH_RETRY_AFTER for r in shed)
    assert not any(isinstance(r, RateLimited) for r in results)
    assert len(await rows("SELECT id FROM login_attempts")) == len(failed)  # shed attempts are not failures


async def test_parallel_logins_with_different_emails_are_checked_one_at_a_time_per_address() -> None:
    emails = [f"guess{i}@example.com" for i in range(6)]
    # each of these emails already failed once from the address, with 13 others: 19, one under the address limit
    await failures_from("203.0.113.7", emails + [f"other{i}@example.com" for i in range(13)])
    results = await asyncio.gather(
        *(login(email, "guess", client_ip="203.0.113.7", presented_token=None) for email in emails),
        return_exceptions=True,
    )
    assert sorted(type(r).__name__ for r in results) == ["LoginFailed"] + ["RateLimited"] * 5
    assert len(await rows("SELECT id FROM login_attempts")) == 20


async def test_bad_logins_from_a_shared_address_do_not_stop_an_account_without_failures_of_its_own(
    client: httpx.AsyncClient,
) -> None:
    await make_account("mod", platform_role="moderator", password=PASSWORD)
    await make_account("member", password=PASSWORD)
    # everyone behind one proxy address: 20 bad logins put the address past its limit
    await failures_from("203.0.113.7", [f"guess{i}@example.com" for i in range(20)])
    assert (await post_login(client, "mod@example.com", PASSWORD)).status_code == 303
    # wrong passwords keep counting: one guess, then the account is refused from this address like the others
    assert (await post_login(client, "member@example.com", "guess")).status_code == 401
    refused = await post_login(client, "member@example.com", PASSWORD)
    assert refused.status_code == 429 and "your address" in refused.text


async def test_past_the_address_limit_each_email_gets_one_slow_guess_and_unknown_emails_cost_no_hash(
    client: httpx.AsyncClient, probe: HashProbe, monkeypatch: pytest.MonkeyPatch
) -> None:
    await make_account("member", password=PASSWORD)
    await failures_from("203.0.113.7", [f"guess{i}@example.com" for i in range(20)])
    monkeypatch.setattr(sessions, "THROTTLE_DELAY", 0.3)
    for email in ("nobody@example.com", "member@example.com"):  # unknown or not, the same slow answer
        started = time.monotonic()
        response = await post_login(client, email, "guess")
        assert response.status_code == 401 and "Invalid email or password" in response.text
        assert time.monotonic() - started >= 0.3
        assert (await post_login(client, email, "guess")).status_code == 429  # its one guess is spent
    assert probe.calls == 1  # the account's guess only: spraying unknown emails runs no argon2
