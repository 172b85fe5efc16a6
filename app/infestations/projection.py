"""Projection of the public join set into the rollup tables (refresh, windows, reconcile, drain)."""

from __future__ import annotations


async def drain() -> int:
    """Claim dirty keys, refresh them, delete only what was refreshed. Returns the number of keys refreshed."""
    raise NotImplementedError("the projection engine is not built yet")
