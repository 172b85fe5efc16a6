from __future__ import annotations

from datetime import datetime

from sqlalchemy import ARRAY, BigInteger, DateTime, ForeignKey, Index, LargeBinary, Text, func
from sqlalchemy.orm import Mapped, mapped_column

from app.kernel.columns import Inserted, Timestamps, closed_sets
from app.kernel.db import Base

PLATFORM_ROLES = ("member", "moderator", "admin")
TRUST_TIERS = ("new", "contributor", "reviewer")
ACCOUNT_STATES = ("probation", "active", "restricted", "suspended", "banned")
TOKEN_SCOPES = (
    "findings:submit",
    "findings:verify",
    "repositories:write",
    "repositories:maintain",
    "reviews:submit",
    "reviews:verify",
)


class Account(Timestamps, Base):
    __tablename__ = "accounts"
    __table_args__ = (
        *closed_sets(platform_role=PLATFORM_ROLES, trust_tier=TRUST_TIERS, state=ACCOUNT_STATES),
        Index("accounts_email_idx", "email", unique=True),
        Index("accounts_handle_idx", "handle", unique=True),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    email: Mapped[str] = mapped_column(Text)  # stored lowercased + trimmed
    handle: Mapped[str] = mapped_column(Text)  # stored lowercased
    password_hash: Mapped[str | None] = mapped_column(Text)
    platform_role: Mapped[str] = mapped_column(Text, server_default="member")
    trust_tier: Mapped[str] = mapped_column(Text, server_default="new")
    state: Mapped[str] = mapped_column(Text, server_default="probation")
    # Real interactive activity only (login); written at most once per 5 minutes.
    last_seen_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class HeldSecret(Inserted):
    """A secret an account holds (an API token, a login session): stored as its sha256 only, revocable."""

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"))
    token_hash: Mapped[bytes] = mapped_column(LargeBinary)  # the secret itself is handed out once, never stored
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    @staticmethod
    def indexes(table: str) -> tuple[Index, Index]:
        """A secret is found by its hash (one row per hash) and listed by its account."""
        return (
            Index(f"{table}_token_hash_idx", "token_hash", unique=True),
            Index(f"{table}_account_id_idx", "account_id"),
        )


class ApiToken(HeldSecret, Base):
    __tablename__ = "api_tokens"
    __table_args__ = HeldSecret.indexes(__tablename__)

    token_prefix: Mapped[str] = mapped_column(Text)
    scopes: Mapped[list[str]] = mapped_column(ARRAY(Text))
    # Throttled: written at most once per 5 minutes per token.
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class WebSession(HeldSecret, Base):
    """Server-side login sessions (authoritative): revocable, rotated at login, expiring."""

    __tablename__ = "web_sessions"
    __table_args__ = (*HeldSecret.indexes(__tablename__), Index("web_sessions_expires_at_idx", "expires_at"))

    csrf_secret: Mapped[str] = mapped_column(Text, server_default="")
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # Throttled like api_tokens.last_used_at.
    last_seen_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class LoginAttempt(Base):
    """Failed login attempts, for rate limiting per account and address and per address (shared by every web
    process). Keyed hashes only (`app.accounts.sessions`): fixed-size rows whatever was typed, no email in clear."""

    __tablename__ = "login_attempts"
    __table_args__ = (
        Index("login_attempts_email_ip_idx", "email_hash", "ip_hash", "attempted_at"),
        Index("login_attempts_ip_idx", "ip_hash", "attempted_at"),
        Index("login_attempts_attempted_at_idx", "attempted_at"),  # pruning of expired attempts
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    email_hash: Mapped[bytes] = mapped_column(LargeBinary)  # HMAC-SHA256 of the normalized email
    ip_hash: Mapped[bytes] = mapped_column(LargeBinary)
    attempted_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
