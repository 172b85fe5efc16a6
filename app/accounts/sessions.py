"""Server-side web sessions and password login (docs/security.md "Sessions and login")."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import math
import secrets
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from cachetools import TTLCache
from sqlalchemy import TextClause, and_, bindparam, select, text
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import HTTPConnection
from starlette.responses import Response

from app.accounts.models import Account, LoginAttempt
from app.accounts.passwords import hash_password_bounded, verify_password_bounded
from app.accounts.service import PASSWORD_MAX, is_valid_email
from app.kernel import db
from app.kernel.actors import is_locked_out
from app.kernel.config import settings
from app.kernel.errors import DomainError, RateLimited
from app.kernel.security import SESSION_COOKIE_NAME
from app.kernel.sql import statement
from app.ops.secrets import client_address, client_ip_hash, secret_key
from app.record import rendered

COOKIE_NAME = SESSION_COOKIE_NAME
IDLE_TIMEOUT = timedelta(hours=12)
ABSOLUTE_LIFETIME = timedelta(days=7)
TOUCH_INTERVAL = timedelta(minutes=5)
RATE_WINDOW = timedelta(minutes=15)
MAX_FAILURES_PER_ACCOUNT = 5  # per account and client address
MAX_FAILURES_PER_ADDRESS = 20  # past it the address is throttled
THROTTLE_DELAY = 1.0  # seconds: the least time an answer past the address limit takes (hides whether it hashed)
INVALID_CREDENTIALS = "invalid email or password"

_STATE_KEY = "tarakan_account"
# Tokens that named no live session, remembered briefly per process and bounded (least recently used out), so a
# garbage or stale cookie costs one lookup, not one a request. Remembering them is safe: a token that is not live
# never becomes live (a session is created under a new random token, and is then only revoked or expired).
DEAD_TOKENS_MAX = 4096
DEAD_TOKEN_SECONDS = 60.0
_dead_tokens: TTLCache[bytes, bool] = TTLCache(maxsize=DEAD_TOKENS_MAX, ttl=DEAD_TOKEN_SECONDS)
# Verified against when the email is unknown, so a miss costs the same argon2 time as a wrong password.
_dummy_hash: str | None = None


class LoginFailed(DomainError):
    """Wrong email or password (deliberately not saying which)."""

    status_code = 401


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
        _dummy_hash = await hash_password_bounded(secrets.token_urlsafe(16))
    return _dummy_hash


async def email_key(email: str) -> bytes:
    """HMAC-SHA256 of the normalized email under the app secret (what `login_attempts.email_hash` holds)."""
    data = email.encode("utf-8", "surrogatepass")
    return hmac.new(await secret_key(), b"login-email:" + data, hashlib.sha256).digest()


_ATTEMPTS = LoginAttempt.__table__
_RECENT_FAILURES = """SELECT count(*) AS n,
       EXTRACT(EPOCH FROM (min(attempted_at) + CAST(:window AS interval) - now())) AS wait
FROM (SELECT attempted_at FROM login_attempts
      WHERE {failures} AND attempted_at > now() - CAST(:window AS interval)
      ORDER BY attempted_at DESC LIMIT :limit) recent"""
_FROM_ADDRESS = _ATTEMPTS.c.ip_hash == bindparam("ip")
_OWN_FAILURES = statement(_RECENT_FAILURES, failures=and_(_ATTEMPTS.c.email_hash == bindparam("email"), _FROM_ADDRESS))
_ADDRESS_FAILURES = statement(_RECENT_FAILURES, failures=_FROM_ADDRESS)


async def _retry_after(
    session: AsyncSession, failures: TextClause, params: dict[str, object], limit: int
) -> int | None:
    """Seconds until an attempt is allowed again for these failures, or None when under the limit."""
    row = (await session.execute(failures, {**params, "window": RATE_WINDOW, "limit": limit})).one()
    if int(row.n) < limit:
        return None
    # the oldest of the last `limit` failures must leave the window before the count drops below the limit
    return max(1, math.ceil(float(row.wait)))


def _rate_limited(what: str, limit: int, wait: int) -> RateLimited:
    minutes = math.ceil(wait / 60)
    return RateLimited(
        {
            "base": [
                f"too many failed logins for {what} (at most {limit} in {int(RATE_WINDOW.total_seconds() // 60)}"
                f" minutes); try again in {minutes} minute{'s' if minutes != 1 else ''}"
            ]
        },
        retry_after=wait,
    )


async def check_rate_limit(session: AsyncSession, email_hash: bytes, ip_hash: bytes) -> bool:
    """Raise RateLimited (429) when this account from this address has too many recent failures, or when the
    address is past its limit and this account has a failure of its own from it. True when the address is past
    its limit and the account has none there: the attempt goes ahead, throttled."""
    params: dict[str, object] = {"email": email_hash, "ip": ip_hash}
    wait = await _retry_after(session, _OWN_FAILURES, params, MAX_FAILURES_PER_ACCOUNT)
    if wait is not None:
        raise _rate_limited("this account from your address", MAX_FAILURES_PER_ACCOUNT, wait)
    wait = await _retry_after(session, _ADDRESS_FAILURES, params, MAX_FAILURES_PER_ADDRESS)
    if wait is None:
        return False
    own_wait = await _retry_after(session, _OWN_FAILURES, params, 1)  # until its newest failure here leaves the window
    if own_wait is None:
        return True
    raise _rate_limited("your address", MAX_FAILURES_PER_ADDRESS, min(wait, own_wait))


async def _forget_attempt(attempt_id: int) -> None:
    async with db.transaction() as session:
        await session.execute(text("DELETE FROM login_attempts WHERE id = :id"), {"id": attempt_id})


async def _authenticate(
    account: Account | None, password: str, *, well_formed: bool, throttled: bool
) -> tuple[Account, str | None]:
    """The account this password opens and its rehash, if any; LoginFailed, one answer for an unknown email, a
    wrong password and a suspended or banned account alike. A shed hash raises its 503."""
    if not well_formed:
        raise LoginFailed({"base": [INVALID_CREDENTIALS]})  # nothing hashed; the attempt stays counted
    if account is None or not account.password_hash:
        if throttled:  # past the address limit no email that is no account's costs a hash (the delay hides it)
            raise LoginFailed({"base": [INVALID_CREDENTIALS]})
        stored = await _dummy()
    else:
        stored = account.password_hash
    ok, new_hash = await verify_password_bounded(stored, password)
    if account is None or not account.password_hash or not ok or is_locked_out(account):
        raise LoginFailed({"base": [INVALID_CREDENTIALS]})
    return account, new_hash


async def _until(deadline: float) -> None:
    await asyncio.sleep(max(0.0, deadline - time.monotonic()))


async def login(email: str, password: str, *, client_ip: str | None, presented_token: str | None) -> LoginResult:
    """Verify a password login and open a new session (rotation: a session presented with the login is revoked).

    Under a per-address advisory lock: check the limits, record the attempt, commit; then verify the password
    outside any transaction (no connection held while hashing); a success deletes the attempt."""
    deadline = time.monotonic() + THROTTLE_DELAY
    email = normalize_email(email)
    well_formed = is_valid_email(email) and len(password) <= PASSWORD_MAX
    email_hash = await email_key(email)
    ip_hash = await client_ip_hash(client_address(client_ip))
    assert ip_hash is not None
    async with db.transaction() as session:
        # per address, not per email: parallel logins with different emails must not all pass the address check;
        # a flood from one address waits at most 3 s for it (then a 503), not holding the pool for ever
        await session.execute(text("SET LOCAL lock_timeout = '3s'"))
        await session.execute(
            text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"), {"k": "login-ip:" + ip_hash.hex()}
        )
        throttled = await check_rate_limit(session, email_hash, ip_hash)
        attempt_id = int(
            (
                await session.execute(
                    text("INSERT INTO login_attempts (email_hash, ip_hash) VALUES (:email, :ip) RETURNING id"),
                    {"email": email_hash, "ip": ip_hash},
                )
            ).scalar_one()
        )
        # bounded pruning: only the last 15 minutes matter, so each attempt removes up to 100 expired rows
        await session.execute(
            text(
                "DELETE FROM login_attempts WHERE id IN (SELECT id FROM login_attempts "
                "WHERE attempted_at < now() - interval '1 day' LIMIT 100)"
            )
        )
        account = None
        if well_formed:
            account = (await session.execute(select(Account).where(Account.email == email))).scalar_one_or_none()
    try:
        account, new_hash = await _authenticate(account, password, well_formed=well_formed, throttled=throttled)
    except LoginFailed:  # the attempt stays counted
        if throttled:
            await _until(deadline)
        raise
    except DomainError:  # shed (503): not a failed guess
        await _forget_attempt(attempt_id)
        raise

    token = new_token()
    async with db.transaction() as session:
        if new_hash is not None:
            # rehash on login: stored hashes follow the current argon2 parameters
            await session.execute(
                text("UPDATE accounts SET password_hash = :h WHERE id = :id"), {"h": new_hash, "id": account.id}
            )
        if presented_token:
            await revoke_session(session, presented_token)
        # a success clears this account's failures from this address (those counted for the address alone and
        # the account's failures from elsewhere stay)
        await session.execute(
            text("DELETE FROM login_attempts WHERE id = :id OR (email_hash = :email AND ip_hash = :ip)"),
            {"id": attempt_id, "email": email_hash, "ip": ip_hash},
        )
        expires_at = await create_session(session, account.id, token)
        await touch_account(session, account.id)
    if throttled:
        await _until(deadline)
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
    token_hash = hash_token(token)
    if token_hash in _dead_tokens:
        return None
    async with db.transaction() as session:
        row = (
            await session.execute(
                text(
                    """SELECT id, account_id FROM web_sessions
                       WHERE token_hash = :h AND revoked_at IS NULL AND expires_at > now()
                         AND COALESCE(last_seen_at, inserted_at) > now() - CAST(:idle AS interval)"""
                ),
                {"h": token_hash, "idle": IDLE_TIMEOUT},
            )
        ).one_or_none()
        if row is None:
            _dead_tokens[token_hash] = True
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


async def signed_in(conn: HTTPConnection) -> bool:
    """Whether the request's session cookie names a live session: the render cache serves every other request as an
    anonymous visitor's (app.record.rendered; a garbage cookie costs no rendering)."""
    return await current_account(conn) is not None


rendered.judge_session_cookies(signed_in)


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
