"""`SingleFlightCache`: an in-process, bounded TTL cache for async loaders, stale-while-revalidate with one refresher
per key (docs/architecture.md "The kernel's rules in words": caches)."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from cachetools import LRUCache, TTLCache

V = TypeVar("V")

log = logging.getLogger(__name__)


class SingleFlightCache(Generic[V]):
    """A TTL cache for async loaders: one refresher per key (an asyncio.Lock), others get the current value; the
    cases and `invalidate()`'s generation: docs/architecture.md "The kernel's rules in words" (caches)."""

    def __init__(self, ttl: Callable[[], float], *, maxsize: int = 64) -> None:
        self._ttl = ttl
        self._maxsize = maxsize
        self._fresh: TTLCache[Hashable, V] = TTLCache(maxsize=maxsize, ttl=0)  # sized on first use
        # key -> (generation, value), kept past expiry; bounded like the fresh values (least recently used out)
        self._last: LRUCache[Hashable, tuple[int, V]] = LRUCache(maxsize=maxsize)
        # key -> refreshes finished (lets waiters share a result)
        self._completed: LRUCache[Hashable, int] = LRUCache(maxsize=maxsize)
        # an evicted lock costs at worst one duplicate load, never a wrong value
        self._locks: LRUCache[tuple[int, Hashable], asyncio.Lock] = LRUCache(maxsize=maxsize)
        self._generation = 0
        # (event loop, key) -> its background refresh, until done
        self._background: dict[tuple[int, Hashable], asyncio.Task[None]] = {}
        self.loads = 0  # loader calls so far (observability for tests and operators)

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
        if last is not None and lock.locked():
            return last[1]  # a refresh is running: serve what we have
        if last is not None and last[0] == self._generation and fresh.ttl > 0:
            self._revalidate(key, loader, lock)  # aged out: serve it, refresh behind
            return last[1]
        return await self._load(key, loader, lock)

    async def _load(self, key: Hashable, loader: Callable[[], Awaitable[V]], lock: asyncio.Lock) -> V:
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
            self.loads += 1
            value = await loader()
            self._completed[key] = self._completed.get(key, 0) + 1
            self._last[key] = (generation, value)
            if generation == self._generation and self._fresh.ttl > 0:
                self._fresh[key] = value
            return value

    def _revalidate(self, key: Hashable, loader: Callable[[], Awaitable[V]], lock: asyncio.Lock) -> None:
        async def refresh() -> None:
            try:
                await self._load(key, loader, lock)
            except Exception as exc:  # the stale value stays; the next caller tries again
                log.warning("background refresh of %r failed (%s); serving the previous value", key, exc)

        loop = asyncio.get_running_loop()
        task_key = (id(loop), key)  # per event loop, as the locks are
        running = self._background.get(task_key)
        if running is not None and not running.done():
            return  # already scheduled, not yet holding the lock
        # an empty context: the caller's transaction or session, if any, is not this task's
        task = loop.create_task(refresh(), context=contextvars.Context())
        self._background[task_key] = task
        task.add_done_callback(lambda _: self._background.pop(task_key, None))

    def invalidate(self) -> None:
        self._generation += 1
        self._fresh.clear()

    def expire(self) -> None:
        """Age every value out now, without an invalidation: the next caller still gets the previous value at once
        and starts one background refresh. For changes that may show one refresh late (counts, not takedowns)."""
        self._fresh.clear()

    def reset(self) -> None:
        """Forget everything, the last known values included (test isolation)."""
        self.invalidate()
        self._last.clear()
        self._completed.clear()
        self.loads = 0
