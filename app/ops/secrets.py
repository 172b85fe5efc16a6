"""The application secret (keys HMACs such as client IP hashes) and helpers built on it.

SECRET_KEY from the environment wins. Without it, the first process to boot stores a random key in
`app_secrets` and every other instance reads that same row: `INSERT ... ON CONFLICT DO NOTHING` then re-read,
so several instances starting together agree on one key (first writer wins) and it survives restarts.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets as _random

from sqlalchemy import text

from app.kernel import db
from app.kernel.config import settings

SECRET_NAME = "secret_key"

_cached: bytes | None = None


async def _load_or_create() -> bytes:
    candidate = _random.token_urlsafe(48)
    async with db.transaction() as session:
        await session.execute(
            text("INSERT INTO app_secrets (name, value) VALUES (:name, :value) ON CONFLICT (name) DO NOTHING"),
            {"name": SECRET_NAME, "value": candidate},
        )
        stored = (
            await session.execute(text("SELECT value FROM app_secrets WHERE name = :name"), {"name": SECRET_NAME})
        ).scalar_one()
    return str(stored).encode()


async def secret_key() -> bytes:
    """The key every instance shares. Cached in-process after the first read. No lock: concurrent first
    callers each run the idempotent insert-then-read and all get the stored value."""
    global _cached
    configured = settings().secret_key
    if configured:
        return configured.encode()
    if _cached is None:
        _cached = await _load_or_create()
    return _cached


def forget_cached_secret() -> None:
    """Drop the in-process copy (tests; an operator rotating the stored key restarts the fleet instead)."""
    global _cached
    _cached = None


async def client_ip_hash(ip: str | None) -> bytes | None:
    """HMAC-SHA256 of "client-ip:"+ip under the app secret: lets the quorum compare addresses without storing
    them."""
    if not ip:
        return None
    return hmac.new(await secret_key(), f"client-ip:{ip}".encode(), hashlib.sha256).digest()
