"""Fixed-window counters in Redis shared by every web process; fail open on an outage (docs/security.md "Limits")."""

from __future__ import annotations

import time
from dataclasses import dataclass

from redis.asyncio import Redis

from app.kernel import outages
from app.kernel.errors import RateLimited


@dataclass(frozen=True)
class Window:
    name: str  # the Redis key's prefix, e.g. "refused"
    limit: int  # events allowed per window (0: no limit)
    seconds: int = 60
    message: str = ""  # the 429's message, e.g. "at most {limit} refused submissions a minute per token"

    def _key(self, subject: str, now: float) -> tuple[str, int]:
        start = int(now // self.seconds) * self.seconds
        return f"tarakan:rate:{self.name}:{subject}:{start}", self.seconds - int(now - start)

    def refusal(self, retry_after: int) -> RateLimited:
        return RateLimited({"rate_limit": [self.message.format(limit=self.limit)]}, retry_after=max(1, retry_after))


async def _redis() -> Redis:
    from app.kernel.queue import pool  # the one Redis pool of a web process; imported late, as app.record.outbox does

    return await pool()


async def require_below(window: Window, subject: str) -> None:
    """429 when `subject` already spent this window's allowance (nothing is counted)."""
    if window.limit <= 0:
        return
    now = time.time()
    key, rest = window._key(subject, now)
    try:
        used = await (await _redis()).get(key)
    except outages.REDIS_ERRORS as exc:
        outages.record(outages.REDIS, exc, source="rate-limit")
        return
    if used is not None and int(used) >= window.limit:
        raise window.refusal(rest)


async def left(window: Window, subject: str) -> tuple[int, int] | None:
    """(events `subject` may still have this window, seconds left in it), nothing counted; None: no limit, or
    Redis is away."""
    if window.limit <= 0:
        return None
    key, rest = window._key(subject, time.time())
    try:
        used = await (await _redis()).get(key)
    except outages.REDIS_ERRORS as exc:
        outages.record(outages.REDIS, exc, source="rate-limit")
        return None
    return max(0, window.limit - int(used or 0)), rest


async def _incr(window: Window, subject: str, events: int = 1) -> tuple[int, int] | None:
    """(events this window, seconds left in it) after counting `events` more; None when Redis is away."""
    key, rest = window._key(subject, time.time())
    try:
        redis = await _redis()
        async with redis.pipeline(transaction=True) as pipe:
            pipe.incrby(key, events)
            pipe.expire(key, rest + 1)
            used, _ = await pipe.execute()
    except outages.REDIS_ERRORS as exc:
        outages.record(outages.REDIS, exc, source="rate-limit")
        return None
    return int(used), rest


async def count(window: Window, subject: str, events: int = 1) -> None:
    """Count `events` (one by default) against `subject`'s current window."""
    if window.limit > 0 and events > 0:
        await _incr(window, subject, events)


async def take(window: Window, subject: str) -> None:
    """Count one event and refuse it (429) when it goes past the window's limit: a request rate."""
    if window.limit <= 0:
        return
    counted = await _incr(window, subject)
    if counted is not None and counted[0] > window.limit:
        raise window.refusal(counted[1])
