"""`SingleFlightCache`: an in-process TTL cache for async loaders with a single-flight refresh.

A `cachetools.TTLCache` holds fresh values; one refresher per key recomputes an expired value while concurrent
callers get the value they already had (stale-while-revalidate). Used for the registry's headline numbers and
the sitemap's child page boundaries, and for the expensive anonymous reads keyed by user input (search, the
status-filtered atlas; docs/security.md): every per-key table is bounded by `maxsize` (least recently used out), so
arbitrary keys cannot grow the process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from cachetools import LRUCache, TTLCache

from app.kernel import db
from app.kernel.audit import latest_event_id

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
        # key -> (generation, value), kept past expiry; bounded like the fresh values (least recently used out)
        self._last: LRUCache[Hashable, tuple[int, V]] = LRUCache(maxsize=maxsize)
        # key -> refreshes finished (lets waiters share a result)
        self._completed: LRUCache[Hashable, int] = LRUCache(maxsize=maxsize)
        # an evicted lock costs at worst one duplicate load, never a wrong value
        self._locks: LRUCache[tuple[int, Hashable], asyncio.Lock] = LRUCache(maxsize=maxsize)
        self._generation = 0
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
            self.loads += 1
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
        self._completed.clear()
        self.loads = 0


class TakedownKeyedCache(Generic[V]):
    """A `SingleFlightCache` for public answers that a takedown must change at the next request in every process.

    The newest audit event id is read at every call (one index probe, as the home fragment does: every takedown is
    audited, docs/domain.md §5.7) and folded into the key; when it differs from the last one this process saw, the
    older entries are dropped. Callers put only anonymous answers here (docs/security.md: a privileged viewer's
    answer never enters a shared cache).
    """

    def __init__(self, ttl: Callable[[], float], *, maxsize: int) -> None:
        self.cache: SingleFlightCache[V] = SingleFlightCache(ttl, maxsize=maxsize)
        self._seen: int | None = None

    async def get(self, key: Hashable, loader: Callable[[], Awaitable[V]]) -> V:
        async with db.read_session() as session:
            generation = await latest_event_id(session)
        if generation != self._seen:
            self.cache.invalidate()
            self._seen = generation
        return await self.cache.get((generation, key), loader)

    def reset(self) -> None:
        self.cache.reset()
        self._seen = None
