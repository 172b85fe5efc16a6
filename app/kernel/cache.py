"""`SingleFlightCache`: an in-process TTL cache for async loaders with a single-flight refresh.

A `cachetools.TTLCache` holds fresh values; one refresher per key recomputes an expired value while concurrent
callers get the value they already had (stale-while-revalidate). Used for the registry's headline numbers and
the sitemap's child page boundaries.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from cachetools import TTLCache

V = TypeVar("V")


class SingleFlightCache(Generic[V]):
    """A TTL cache for async loaders: one refresher per key (an asyncio.Lock), others get the current value.

    - fresh hit: returned from the `TTLCache` (no await, a dict lookup).
    - expired, a refresh already running, a previous value known: that value is returned at once.
    - expired, nothing known yet: callers wait for the one refresher and share its result (also with TTL 0).
    `invalidate()` drops fresh values and bumps a generation, so a refresh that started before the invalidation
    cannot mark its (possibly pre-change) result fresh.
    """

    def __init__(self, ttl: Callable[[], float], *, maxsize: int = 64) -> None:
        self._ttl = ttl
        self._maxsize = maxsize
        self._fresh: TTLCache[Hashable, V] = TTLCache(maxsize=maxsize, ttl=0)  # sized on first use
        self._last: dict[Hashable, tuple[int, V]] = {}  # key -> (generation, value), kept past expiry
        self._completed: dict[Hashable, int] = {}  # key -> refreshes finished (lets waiters share a result)
        self._locks: dict[tuple[int, Hashable], asyncio.Lock] = {}
        self._generation = 0

    def _fresh_cache(self) -> TTLCache[Hashable, V]:
        ttl = self._ttl()
        if ttl != self._fresh.ttl:  # the configured TTL changed (tests, operators): start over
            self._fresh = TTLCache(maxsize=self._maxsize, ttl=ttl)
        return self._fresh

    def _lock(self, key: Hashable) -> asyncio.Lock:
        # locks belong to an event loop; a CLI may run several loops in one process
        lock_key = (id(asyncio.get_running_loop()), key)
        lock = self._locks.get(lock_key)
        if lock is None:
            lock = self._locks[lock_key] = asyncio.Lock()
        return lock

    async def get(self, key: Hashable, loader: Callable[[], Awaitable[V]]) -> V:
        fresh = self._fresh_cache()
        try:
            return fresh[key]
        except KeyError:
            pass
        lock = self._lock(key)
        last = self._last.get(key)
        if lock.locked() and last is not None:
            return last[1]  # a refresh is running: serve what we have
        seen = self._completed.get(key, 0)
        async with lock:
            try:
                return self._fresh_cache()[key]
            except KeyError:
                pass
            last = self._last.get(key)
            if self._completed.get(key, 0) != seen and last is not None and last[0] == self._generation:
                return last[1]  # the refresher we waited for produced a result after the last invalidation
            generation = self._generation
            value = await loader()
            self._completed[key] = self._completed.get(key, 0) + 1
            self._last[key] = (generation, value)
            if generation == self._generation and self._fresh.ttl > 0:
                self._fresh[key] = value
            return value

    def invalidate(self) -> None:
        self._generation += 1
        self._fresh.clear()

    def reset(self) -> None:
        """Forget everything, the last known values included (test isolation)."""
        self.invalidate()
        self._last.clear()
