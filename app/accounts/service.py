"""Accounts and API tokens: the only writer of `accounts` and `api_tokens` (only a token's SHA-256 is stored;
docs/security.md)."""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, LargeBinary, bindparam, func, or_, select, text, update
from sqlalchemy.exc import IntegrityError

from app.accounts.models import ACCOUNT_STATES, PLATFORM_ROLES, TOKEN_SCOPES, TRUST_TIERS, Account, ApiToken
from app.accounts.passwords import hash_password_bounded
from app.kernel import db
from app.kernel.actors import LOCKED_OUT_STATES, has_moderator_role, is_locked_out
from app.kernel.errors import Forbidden, NotFound, Unauthorized, ValidationError

EMAIL_RE = re.compile(
    r"^[a-z0-9.!#$%&'*+/=?^_`{|}~-]+@[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)+$"
)
EMAIL_MAX = 254
HANDLE_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{1,38}$")
# Handles share the URL namespace with the site's own top-level paths (docs/domain.md §1.6).
RESERVED_HANDLES = frozenset(
    {
        "about", "account", "accounts", "admin", "api", "app", "assets", "atom", "auth", "epidemics", "explore",
        "feed", "feeds", "findings", "healthz", "help", "home", "infestations", "jobs", "login", "logout",
        "metrics", "moderation", "moderator", "new", "patterns", "readyz", "register", "repos", "repositories",
        "reports", "robots", "root", "search", "security", "settings", "signup", "sitemap", "sitemaps", "static",
        "support", "system", "tarakan", "tokens", "www",
    }
)  # fmt: skip
PASSWORD_MIN = 12
PASSWORD_MAX = 1024  # argon2 hashes any length; a cap keeps hashing cost bounded
TOKEN_PREFIX = "tk_"
TOKEN_RE = re.compile(r"^tk_[A-Za-z0-9_-]{40}$")

# The bearer check in one statement: the token and its account, and, as a data-modifying CTE of the same statement,
# the last-used write of a token that passes (not revoked, its account not locked out), at most once per 5 minutes:
# the UPDATE re-checks the age on the row it locks, so concurrent requests with the same token write it once.
_DIGEST = bindparam("digest", type_=LargeBinary)
_TOUCH_TOKEN = (
    update(ApiToken)
    .where(
        ApiToken.token_hash == _DIGEST,
        ApiToken.revoked_at.is_(None),
        or_(ApiToken.last_used_at.is_(None), ApiToken.last_used_at < func.now() - text("interval '5 minutes'")),
        Account.id == ApiToken.account_id,
        Account.state.not_in(LOCKED_OUT_STATES),
    )
    .values(last_used_at=func.now())
    .returning(ApiToken.id)
    .cte("touched")
)
_BEARER = (
    select(ApiToken.id, ApiToken.scopes, ApiToken.revoked_at, Account)
    .join(Account, Account.id == ApiToken.account_id)
    .where(ApiToken.token_hash == _DIGEST)
    .add_cte(_TOUCH_TOKEN)
)


def normalize_email(raw: str) -> str:
    return raw.strip().lower()


def is_valid_email(email: str) -> bool:
    """A normalized email of the shape accounts are created with (length first: the pattern never sees more
    than `EMAIL_MAX` characters). Login refuses anything else before any hashing or SQL."""
    return len(email) <= EMAIL_MAX and EMAIL_RE.fullmatch(email) is not None


def normalize_handle(raw: str) -> str:
    return raw.strip().lower()


def _validate_new_account(
    email: str, handle: str, platform_role: str, trust_tier: str, state: str, password: str | None
) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    if not email:
        errors["email"] = ["is required"]
    elif len(email) > EMAIL_MAX:
        errors["email"] = [f"must be at most {EMAIL_MAX} characters"]
    elif not EMAIL_RE.match(email):
        errors["email"] = ["is not a valid email address"]
    if not HANDLE_RE.match(handle):
        errors["handle"] = [
            "must be 2-39 characters of a-z, 0-9, '_' or '-', starting with a letter or digit",
        ]
    elif handle in RESERVED_HANDLES:
        errors["handle"] = ["is reserved"]
    if platform_role not in PLATFORM_ROLES:
        errors["platform_role"] = [f"must be one of {', '.join(PLATFORM_ROLES)}"]
    if trust_tier not in TRUST_TIERS:
        errors["trust_tier"] = [f"must be one of {', '.join(TRUST_TIERS)}"]
    if state not in ACCOUNT_STATES:
        errors["state"] = [f"must be one of {', '.join(ACCOUNT_STATES)}"]
    if password is not None and len(password) < PASSWORD_MIN:
        errors["password"] = [f"must be at least {PASSWORD_MIN} characters"]
    elif password is not None and len(password) > PASSWORD_MAX:
        errors["password"] = [f"must be at most {PASSWORD_MAX} characters"]
    return errors


def _duplicate_errors(exc: IntegrityError) -> ValidationError:
    constraint = getattr(getattr(exc.orig, "diag", None), "constraint_name", None)
    if constraint == "accounts_handle_idx":
        return ValidationError({"handle": ["is already taken"]})
    if constraint == "accounts_email_idx":
        return ValidationError({"email": ["is already registered"]})
    raise exc


async def create_account(
    email: str,
    handle: str,
    *,
    platform_role: str = "member",
    trust_tier: str = "new",
    state: str = "probation",
    password: str | None = None,
) -> Account:
    """Create an account. Every invalid field is reported at once; duplicates name `email` or `handle`."""
    email = normalize_email(email)
    handle = normalize_handle(handle)
    errors = _validate_new_account(email, handle, platform_role, trust_tier, state, password)
    if errors:
        raise ValidationError(errors)
    password_hash = await hash_password_bounded(password) if password is not None else None
    account = Account(
        email=email,
        handle=handle,
        password_hash=password_hash,
        platform_role=platform_role,
        trust_tier=trust_tier,
        state=state,
    )
    try:
        async with db.transaction() as session:
            taken = (
                await session.execute(
                    select(Account.email, Account.handle).where((Account.email == email) | (Account.handle == handle))
                )
            ).all()
            for taken_email, taken_handle in taken:
                if taken_email == email:
                    errors.setdefault("email", []).append("is already registered")
                if taken_handle == handle:
                    errors.setdefault("handle", []).append("is already taken")
            if errors:
                raise ValidationError(errors)
            session.add(account)
            await session.flush()  # a concurrent insert of the same email/handle surfaces here, not at commit
            await session.refresh(account)
    except IntegrityError as exc:  # lost a race with another create: same answer as the pre-check
        raise _duplicate_errors(exc) from None
    return account


async def _one_account(where: ColumnElement[bool]) -> Account | None:
    async with db.read_session(replica=False) as session:
        account = (await session.execute(select(Account).where(where))).scalar()
        if account is not None:
            session.expunge(account)  # read_session ends with a rollback, which would expire a still-attached row
        return account


async def get_account_by_email(email: str) -> Account | None:
    return await _one_account(Account.email == normalize_email(email))


async def get_account_by_handle(handle: str) -> Account | None:
    return await _one_account(Account.handle == normalize_handle(handle))


async def require_account_by_email(email: str, *, field: str = "as") -> Account:
    """The account with this email, or NotFound naming `field` (the CLI's `--as EMAIL` and friends)."""
    account = await get_account_by_email(email)
    if account is None:
        raise NotFound({field: [f"no account with email {normalize_email(email)}"]})
    return account


async def get_account(account_id: int) -> Account | None:
    return await _one_account(Account.id == account_id)


def account_json(account: Account) -> dict[str, Any]:
    return {
        "id": account.id,
        "email": account.email,
        "handle": account.handle,
        "platform_role": account.platform_role,
        "trust_tier": account.trust_tier,
        "state": account.state,
        "inserted_at": account.inserted_at.isoformat() if account.inserted_at else None,
    }


def _token_digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def validate_scopes(scopes: Iterable[str]) -> list[str]:
    """Trimmed, de-duplicated, known scopes; at least one."""
    cleaned = sorted({s.strip() for s in scopes if s.strip()})
    if not cleaned:
        raise ValidationError({"scopes": [f"must name at least one of {', '.join(TOKEN_SCOPES)}"]})
    unknown = [s for s in cleaned if s not in TOKEN_SCOPES]
    if unknown:
        raise ValidationError({"scopes": [f"unknown scope {s!r}; allowed: {', '.join(TOKEN_SCOPES)}" for s in unknown]})
    return cleaned


async def create_token(account_id: int, scopes: list[str]) -> str:
    """Issue an API token and return its secret. This is the only time the secret exists in clear."""
    cleaned = validate_scopes(scopes)
    secret = TOKEN_PREFIX + secrets.token_urlsafe(30)  # 30 random bytes = 40 url-safe characters
    async with db.transaction() as session:
        if await session.get(Account, account_id) is None:
            raise NotFound({"account": ["does not exist"]})
        session.add(
            ApiToken(account_id=account_id, token_hash=_token_digest(secret), token_prefix=secret[:8], scopes=cleaned)
        )
    return secret


async def revoke_token(account_id: int, token_prefix: str) -> int:
    """Revoke an account's live tokens starting with `token_prefix` (as listed to the owner). Returns how many."""
    async with db.transaction() as session:
        result = await session.execute(
            update(ApiToken)
            .where(
                ApiToken.account_id == account_id,
                ApiToken.token_prefix == token_prefix,
                ApiToken.revoked_at.is_(None),
            )
            .values(revoked_at=func.now())
        )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def _bearer_secret(authorization_header: str | None) -> str:
    if authorization_header is None or not authorization_header.strip():
        raise Unauthorized({"authorization": ["a bearer token is required (Authorization: Bearer TOKEN)"]})
    scheme, _, value = authorization_header.strip().partition(" ")
    value = value.strip()
    if scheme.lower() != "bearer" or not TOKEN_RE.match(value):
        raise Unauthorized({"authorization": ["must be 'Bearer' followed by an API token (tk_...)"]})
    return value


@dataclass(frozen=True)
class ApiCaller:
    """Who sent an API request: the token's account, its scopes and the token itself (what refusals count against)."""

    account: Account
    scopes: frozenset[str]
    token_id: int


def refused_token(*, revoked: bool) -> Unauthorized:
    """The bearer check's 401: an unknown token, or a revoked one (also the report transaction's answer when the
    token it was sent with is revoked or gone by then: app/reports/policy.py `load_submitter`)."""
    if revoked:
        return Unauthorized({"authorization": ["this API token has been revoked"]})
    return Unauthorized({"authorization": ["is not a valid API token"]})


async def bearer_caller(authorization_header: str | None) -> ApiCaller:
    """The caller of a bearer token. Unauthorized for a missing, malformed, unknown or revoked token; Forbidden
    when the account is suspended or banned. One statement in autocommit (the lookup, and the throttled last-used
    write of a token that passes): the check runs on every API request (docs/benchmarks.md "Ingest capacity")."""
    return await _checked_caller(_token_digest(_bearer_secret(authorization_header)))


async def _checked_caller(digest: bytes) -> ApiCaller:
    async with db.statement_session() as session:
        row = (await session.execute(_BEARER, {"digest": digest})).one_or_none()
    if row is None:
        raise refused_token(revoked=False)
    token_id, scopes, revoked_at, account = row
    if revoked_at is not None:
        raise refused_token(revoked=True)
    if is_locked_out(account):
        raise Forbidden({"account": [f"is {account.state}"]})
    return ApiCaller(account, frozenset(scopes), int(token_id))


# The report routes' pre-body check remembers a passed check for REMEMBERED_CHECK_SECONDS in this process, so an
# agent's burst of reports costs one bearer statement, not one a report (docs/security.md "API tokens"). It only
# decides whether the body is read: the report's transaction checks the token and the account again in its first
# statement, so a revoked token or a suspended account stores nothing. Failures are never remembered.
REMEMBERED_CHECK_SECONDS = 5.0
REMEMBERED_CHECKS = 1024  # tokens; past it the oldest entry goes (insertion order is expiry order)
_remembered: dict[bytes, tuple[float, ApiCaller]] = {}


async def remembered_bearer_caller(authorization_header: str | None) -> ApiCaller:
    """`bearer_caller`, served from a check this process passed in the last REMEMBERED_CHECK_SECONDS when there is
    one. Only for routes whose transaction checks the token again (`app.reports.policy.load_submitter`)."""
    digest = _token_digest(_bearer_secret(authorization_header))
    entry = _remembered.get(digest)
    if entry is not None and entry[0] > time.monotonic():
        return entry[1]
    caller = await _checked_caller(digest)
    _remembered.pop(digest, None)  # re-inserted last: its expiry is the latest
    while len(_remembered) >= REMEMBERED_CHECKS:
        del _remembered[next(iter(_remembered))]
    _remembered[digest] = (time.monotonic() + REMEMBERED_CHECK_SECONDS, caller)
    return caller


def refused_subject(caller: ApiCaller) -> str | None:
    """What a caller's refused submissions count against: its token; moderators and admins are exempt, as from
    the report limits (docs/security.md "Body budget")."""
    return None if has_moderator_role(caller.account) else f"token:{caller.token_id}"


async def authenticate_bearer(authorization_header: str | None, *accepted: str) -> tuple[Account, frozenset[str]]:
    """`bearer_caller`'s account and scopes; Forbidden (given `accepted` scopes) when the token carries none."""
    caller = await bearer_caller(authorization_header)
    if accepted:
        require_scope(caller.scopes, *accepted)
    return caller.account, caller.scopes


def require_scope(scopes: frozenset[str], *accepted: str) -> None:
    """Forbidden unless the token carries at least one of the accepted scopes."""
    if not scopes.intersection(accepted):
        raise Forbidden({"scope": [f"this API token needs the scope {' or '.join(accepted)}"]})
