"""Password hashing with argon2id (argon2-cffi's RFC 9106 "low memory" defaults), bounded per process and off the
event loop in the `*_bounded` wrappers (docs/security.md "Limits")."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from argon2 import PasswordHasher, Type
from argon2.exceptions import InvalidHashError, VerificationError

from app.kernel.errors import ServiceUnavailable

HASH_CONCURRENCY = 2
HASH_QUEUE = 32
HASH_RETRY_AFTER = 2  # seconds

_hasher = PasswordHasher(type=Type.ID)
T = TypeVar("T")


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


class _Gate:
    """A semaphore of `HASH_CONCURRENCY` with a bounded queue, one per event loop (asyncio primitives belong to
    the loop they were first used on; the CLI and tests run several loops in one process)."""

    def __init__(self) -> None:
        self.semaphore = asyncio.Semaphore(HASH_CONCURRENCY)
        self.waiting = 0


_gates: dict[int, _Gate] = {}


def _gate() -> _Gate:
    key = id(asyncio.get_running_loop())
    gate = _gates.get(key)
    if gate is None:
        gate = _gates[key] = _Gate()
    return gate


async def _bounded(fn: Callable[..., T], *args: str) -> T:
    gate = _gate()
    if gate.semaphore.locked() and gate.waiting >= HASH_QUEUE:
        raise ServiceUnavailable(
            {"base": ["too many logins at once; try again in a few seconds"]}, retry_after=HASH_RETRY_AFTER
        )
    gate.waiting += 1
    try:
        await gate.semaphore.acquire()
    finally:
        gate.waiting -= 1
    try:
        return await asyncio.to_thread(fn, *args)
    finally:
        gate.semaphore.release()


async def hash_password_bounded(password: str) -> str:
    return await _bounded(hash_password, password)


async def verify_password_bounded(password_hash: str, password: str) -> tuple[bool, str | None]:
    return await _bounded(verify_password, password_hash, password)
