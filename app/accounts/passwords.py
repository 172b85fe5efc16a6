"""Password hashing with argon2id (argon2-cffi's defaults: RFC 9106 "low memory" profile).

Both functions are CPU-bound (tens of milliseconds by design): call them from async code through
`asyncio.to_thread` so one login does not stall every other request on the event loop.
"""

from __future__ import annotations

from argon2 import PasswordHasher, Type
from argon2.exceptions import InvalidHashError, VerificationError

_hasher = PasswordHasher(type=Type.ID)


def hash_password(password: str) -> str:
    """An argon2id PHC string (`$argon2id$v=19$m=...,t=...,p=...$salt$hash`)."""
    return str(_hasher.hash(password))


def verify_password(password_hash: str, password: str) -> tuple[bool, str | None]:
    """(matches, new_hash). `new_hash` is set when the stored hash used older parameters and the password
    matched: the caller stores it so hashes follow our parameters without a forced reset."""
    try:
        _hasher.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False, None
    if _hasher.check_needs_rehash(password_hash):
        return True, hash_password(password)
    return True, None
