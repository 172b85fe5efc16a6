"""The application secret (the key of HMACs such as client address hashes): SECRET_KEY, else one random key stored by
the first process (docs/scaling.md)."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets as _random

from sqlalchemy import text

from app.kernel import db
from app.kernel.config import settings

SECRET_NAME = "secret_key"
IPV6_PREFIX = 64  # rotating addresses inside one subscriber's /64 buys nothing

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


def client_address(ip: str | None) -> str:
    """One client as the login limits and the quorum's same-address rule count it: an IPv4 address, or the /64 of
    an IPv6 one (one subscriber's prefix); an IPv4-mapped IPv6 address counts as its IPv4; anything unparsable is
    taken as given."""
    if not ip:
        return "unknown"
    try:
        parsed = ipaddress.ip_address(ip)
    except ValueError:
        return ip
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.IPv6Network((parsed, IPV6_PREFIX), strict=False))
    return str(parsed)


async def client_ip_hash(ip: str | None) -> bytes | None:
    """HMAC-SHA256 of "client-ip:" + `client_address(ip)` under the app secret: lets the login limits and the
    quorum compare clients without storing addresses. None without an address."""
    if not ip:
        return None
    return hmac.new(await secret_key(), f"client-ip:{client_address(ip)}".encode(), hashlib.sha256).digest()
