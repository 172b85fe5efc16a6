"""Server-side web sessions and password login (docs/domain.md §12, decision 5).

A session is a row in `web_sessions`; the cookie holds a random token and the table only its sha256, so a
database leak does not hand out live sessions. Sessions are authoritative: revoking the row logs the browser out
on every instance at its next request.

Lifetimes (chosen here, documented for operators): a session ends after **12 hours without a request** (idle) or
**7 days after login** (absolute, `expires_at`), whichever comes first. `last_seen_at` is written at most once per
5 minutes, so the idle limit is exact to within those 5 minutes and a busy browser costs one small UPDATE per
5 minutes, not one per request.

Login rate limits, over failed attempts in `login_attempts` (shared by every web process): 5 failures per
account (email) and 20 per client address in 15 minutes. Past either limit every attempt is refused, even with
the right password, until the oldest counted failure leaves the window.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import HTTPConnection
from starlette.responses import Response

from app.accounts.models import Account
from app.accounts.passwords import hash_password, verify_password
from app.kernel import db
from app.kernel.config import settings
from app.kernel.errors import DomainError, RateLimited
from app.kernel.policy import is_locked_out
from app.kernel.security import SESSION_COOKIE_NAME
from app.ops.secrets import client_ip_hash

COOKIE_NAME = SESSION_COOKIE_NAME
IDLE_TIMEOUT = timedelta(hours=12)
ABSOLUTE_LIFETIME = timedelta(days=7)
TOUCH_INTERVAL = timedelta(minutes=5)
RATE_WINDOW = timedelta(minutes=15)
MAX_FAILURES_PER_ACCOUNT = 5
MAX_FAILURES_PER_ADDRESS = 20
INVALID_CREDENTIALS = "invalid email or password"

_STATE_KEY = "tarakan_account"
# Verified against when the email is unknown, so a miss costs the same argon2 time as a wrong password.
_dummy_hash: str | None = None


class LoginFailed(DomainError):
    """Wrong email or password (deliberately not saying which)."""

    status_code = 401


class AccountBlocked(DomainError):
    status_code = 403


@dataclass(frozen=True)
class LoginResult:
    account: Account
    token: str
    expires_at: datetime


def new_token() -> str:
    return secrets.token_urlsafe(32)


def hash_token(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def normalize_email(email: str) -> str:
    return email.strip().lower()


async def _dummy() -> str:
    global _dummy_hash
    if _dummy_hash is None:
        _dummy_hash = await asyncio.to_thread(hash_password, secrets.token_urlsafe(16))
    return _dummy_hash


async def _retry_after(session: AsyncSession, column: str, value: object, limit: int) -> int | None:
    """Seconds until an attempt is allowed again for this email/address, or None when under the limit."""
    row = (
        await session.execute(
            text(
                f"""SELECT count(*) AS n,
                          EXTRACT(EPOCH FROM (min(attempted_at) + CAST(:window AS interval) - now())) AS wait
                   FROM (SELECT attempted_at FROM login_attempts
                         WHERE {column} = :value AND attempted_at > now() - CAST(:window AS interval)
                         ORDER BY attempted_at DESC LIMIT :limit) recent"""
            ),
            {"value": value, "window": RATE_WINDOW, "limit": limit},
        )
    ).one()
    if int(row.n) < limit:
        return None
    # the oldest of the last `limit` failures must leave the window before the count drops below the limit
    return max(1, math.ceil(float(row.wait)))


async def check_rate_limit(session: AsyncSession, email: str, ip_hash: bytes) -> None:
    """Raise RateLimited (429) when the account or the address has too many recent failures."""
    for column, value, limit, what in (
        ("email", email, MAX_FAILURES_PER_ACCOUNT, "this account"),
        ("ip_hash", ip_hash, MAX_FAILURES_PER_ADDRESS, "your address"),
    ):
        wait = await _retry_after(session, column, value, limit)
        if wait is not None:
            minutes = math.ceil(wait / 60)
            raise RateLimited(
                {
                    "base": [
                        f"too many failed logins for {what} (at most {limit} in {int(RATE_WINDOW.total_seconds() // 60)}"
                        f" minutes); try again in {minutes} minute{'s' if minutes != 1 else ''}"
                    ]
                },
                retry_after=wait,
            )


async def login(email: str, password: str, *, client_ip: str | None, presented_token: str | None) -> LoginResult:
    """Verify a password login and open a new session (rotation: a session presented with the login is revoked).

    Failures are recorded for the rate limit in their own committed transaction; the rate limit is checked under
    a per-email advisory lock so parallel guesses cannot all slip under it."""
    email = normalize_email(email)
    ip_hash = await client_ip_hash(client_ip or "unknown")
    assert ip_hash is not None
    async with db.transaction() as session:
        await session.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"), {"k": "login:" + email})
        await check_rate_limit(session, email, ip_hash)
        account = (await session.execute(select(Account).where(Account.email == email))).scalar_one_or_none()
        stored = account.password_hash if account is not None and account.password_hash else await _dummy()
        ok, new_hash = await asyncio.to_thread(verify_password, stored, password)
        if account is None or not account.password_hash or not ok:
            await session.execute(
                text("INSERT INTO login_attempts (email, ip_hash) VALUES (:email, :ip)"),
                {"email": email, "ip": ip_hash},
            )
            # bounded pruning: only the last 15 minutes matter, so each failure removes up to 100 expired rows
            await session.execute(
                text(
                    "DELETE FROM login_attempts WHERE id IN (SELECT id FROM login_attempts "
                    "WHERE attempted_at < now() - interval '1 day' LIMIT 100)"
                )
            )
            failed = True
        else:
            failed = False
    if failed:
        raise LoginFailed({"base": [INVALID_CREDENTIALS]})
    assert account is not None
    if is_locked_out(account):
        raise AccountBlocked({"base": [f"this account is {account.state} and cannot log in"]})

    token = new_token()
    async with db.transaction() as session:
        if new_hash is not None:
            # rehash on login: stored hashes follow the current argon2 parameters
            await session.execute(
                text("UPDATE accounts SET password_hash = :h WHERE id = :id"), {"h": new_hash, "id": account.id}
            )
        if presented_token:
            await revoke_session(session, presented_token)
        # a successful login clears this account's failures (the per-address ones stay)
        await session.execute(text("DELETE FROM login_attempts WHERE email = :email"), {"email": email})
        expires_at = await create_session(session, account.id, token)
        await touch_account(session, account.id)
    return LoginResult(account=account, token=token, expires_at=expires_at)


async def create_session(session: AsyncSession, account_id: int, token: str) -> datetime:
    """Store a new session for `token` (only its sha256); returns its absolute expiry."""
    expires_at: datetime = (
        await session.execute(
            text(
                """INSERT INTO web_sessions (account_id, token_hash, csrf_secret, expires_at)
                   VALUES (:account_id, :token_hash, :csrf, now() + CAST(:lifetime AS interval))
                   RETURNING expires_at"""
            ),
            {
                "account_id": account_id,
                "token_hash": hash_token(token),
                "csrf": secrets.token_urlsafe(16),
                "lifetime": ABSOLUTE_LIFETIME,
            },
        )
    ).scalar_one()
    return expires_at


async def open_session(account_id: int) -> str:
    """A new session for an account without a password check (operators, tests); returns the cookie token."""
    token = new_token()
    async with db.transaction() as session:
        await create_session(session, account_id, token)
    return token


async def touch_account(session: AsyncSession, account_id: int) -> None:
    """`accounts.last_seen_at` records real activity (a login), at most once per 5 minutes."""
    await session.execute(
        text(
            """UPDATE accounts SET last_seen_at = now()
               WHERE id = :id AND (last_seen_at IS NULL OR last_seen_at < now() - CAST(:every AS interval))"""
        ),
        {"id": account_id, "every": TOUCH_INTERVAL},
    )


async def revoke_session(session: AsyncSession, token: str) -> bool:
    """Revoke the session of a token. Compare-and-swap: only a live row flips, so two racing logouts or a
    logout racing a login rotation revoke once and neither overwrites the other's `revoked_at`."""
    result = await session.execute(
        text(
            """UPDATE web_sessions SET revoked_at = now()
               WHERE id = (SELECT id FROM web_sessions WHERE token_hash = :h) AND revoked_at IS NULL"""
        ),
        {"h": hash_token(token)},
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


async def revoke_account_sessions(session: AsyncSession, account_id: int) -> int:
    """Log an account out everywhere (suspension, ban)."""
    result = await session.execute(
        text("UPDATE web_sessions SET revoked_at = now() WHERE account_id = :id AND revoked_at IS NULL"),
        {"id": account_id},
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


async def logout(token: str | None) -> bool:
    if not token:
        return False
    async with db.transaction() as session:
        return await revoke_session(session, token)


async def load_session(token: str) -> Account | None:
    """The account of a live session (not revoked, not past its absolute expiry, not idle for 12 h), and a
    throttled `last_seen_at` bump; None otherwise."""
    if not token or len(token) > 128:
        return None
    async with db.transaction() as session:
        row = (
            await session.execute(
                text(
                    """SELECT id, account_id FROM web_sessions
                       WHERE token_hash = :h AND revoked_at IS NULL AND expires_at > now()
                         AND COALESCE(last_seen_at, inserted_at) > now() - CAST(:idle AS interval)"""
                ),
                {"h": hash_token(token), "idle": IDLE_TIMEOUT},
            )
        ).one_or_none()
        if row is None:
            return None
        # one atomic conditional UPDATE: concurrent requests of one browser write at most once per interval
        await session.execute(
            text(
                """UPDATE web_sessions SET last_seen_at = now()
                   WHERE id = :id AND (last_seen_at IS NULL OR last_seen_at < now() - CAST(:every AS interval))"""
            ),
            {"id": row.id, "every": TOUCH_INTERVAL},
        )
        return (await session.execute(select(Account).where(Account.id == row.account_id))).scalar_one()


def session_token(conn: HTTPConnection) -> str | None:
    return conn.cookies.get(COOKIE_NAME) or None


async def current_account(conn: HTTPConnection) -> Account | None:
    """The logged-in account of this request (loaded once per request, lazily: public pages without a session
    cookie never touch the sessions table)."""
    cached = conn.scope.setdefault("state", {})
    if _STATE_KEY in cached:
        account: Account | None = cached[_STATE_KEY]
        return account
    token = session_token(conn)
    account = await load_session(token) if token else None
    cached[_STATE_KEY] = account
    return account


def set_session_cookie(response: Response, token: str) -> None:
    response.set_cookie(
        COOKIE_NAME,
        token,
        max_age=int(ABSOLUTE_LIFETIME.total_seconds()),
        path="/",
        httponly=True,
        samesite="lax",
        secure=not settings().local_dev,
    )


def clear_session_cookie(response: Response) -> None:
    response.delete_cookie(COOKIE_NAME, path="/", httponly=True, samesite="lax", secure=not settings().local_dev)
