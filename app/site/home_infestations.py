"""The home page's infestation section as one shared, versioned fragment (docs/domain.md §13 "Home refresh
discipline")."""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text

from app.infestations import queries
from app.infestations.constellation import constellation_layout
from app.kernel import db, flags
from app.kernel.audit import latest_event_id
from app.kernel.templating import environment

VERSION_TTL_SECONDS = 5.0
HOME_TOP = 12
HOME_DAYS = 30
POLL_SECONDS = 15

# Every probe reads one end of an index (the dirty-key queue is tiny while the workers keep up). A refresh that
# keeps or adds a pattern moves max(refreshed_at); one that only deletes a pattern (its last public instance left)
# follows a change-feed entry written with the change that emptied it, so the newest feed seq moved with the mark
# (a whole-table count(*) of the patterns did this job before: O(patterns), 800k rows at Tier C, every 5 s).
_VERSION_SQL = """
SELECT (SELECT max(refreshed_at) FROM infestation_patterns) AS refreshed,
       (SELECT max(seq) FROM changes) AS changes,
       (SELECT max(dirtied_at) FROM infestation_dirty_keys) AS dirtied,
       (SELECT count(*) FROM infestation_dirty_keys) AS dirty
"""


@dataclass(frozen=True)
class Rendered:
    etag: str
    html: str
    items: list[dict[str, Any]]


@dataclass
class _State:
    etag: str | None = None
    etag_at: float = 0.0
    generation: int = 0
    rendered: Rendered | None = None
    version_queries: int = 0  # observability for tests and operators: how often the version was computed
    renders: int = 0  # how often the list query ran


_state = _State()
_version_lock: asyncio.Lock | None = None
_render_lock: asyncio.Lock | None = None


def _locks() -> tuple[asyncio.Lock, asyncio.Lock]:
    global _version_lock, _render_lock
    if _version_lock is None or _render_lock is None:
        _version_lock, _render_lock = asyncio.Lock(), asyncio.Lock()
    return _version_lock, _render_lock


def stats() -> dict[str, int]:
    return {"version_queries": _state.version_queries, "renders": _state.renders}


def clear() -> None:
    """Forget the cached version and fragment of this process (tests; after a deploy)."""
    global _state
    _state = _State()


async def current_etag() -> str:
    """The strong ETag of the current fragment; at most one version query per TTL per process."""
    async with db.read_session() as session:
        generation = await latest_event_id(session)
    if _fresh(generation):
        return _state.etag  # type: ignore[return-value]  # _fresh() implies a cached etag
    version_lock, _ = _locks()
    async with version_lock:
        if _fresh(generation):
            return _state.etag  # type: ignore[return-value]  # another request refreshed it while we waited
        if await flags.read_from_rollup():
            async with db.read_session() as session:
                row = (await session.execute(text(_VERSION_SQL))).mappings().one()
            _state.version_queries += 1
            hour = int(time.time() // 3600)
            version = "|".join(
                str(v) for v in (row["refreshed"], row["changes"], row["dirtied"], row["dirty"], hour, generation)
            )
        else:  # read live from source: re-render at most once per TTL slot
            version = f"legacy|{int(time.time() // VERSION_TTL_SECONDS)}|{generation}"
        digest = hashlib.sha256(version.encode()).hexdigest()[:32]
        _state.etag = f'"home-infestations-{digest}"'
        _state.etag_at = time.monotonic()
        _state.generation = generation
        return _state.etag


def _fresh(generation: int) -> bool:
    """The cached version stands: younger than the TTL and no takedown audited anywhere since."""
    return (
        _state.etag is not None
        and time.monotonic() - _state.etag_at < VERSION_TTL_SECONDS
        and _state.generation == generation
    )


async def rendered(etag: str) -> Rendered:
    """The fragment for `etag`, rendered once per version per process."""
    current = _state.rendered
    if current is not None and current.etag == etag:
        return current
    _, render_lock = _locks()
    async with render_lock:
        current = _state.rendered
        if current is not None and current.etag == etag:
            return current
        items = await queries.list_infestations(days=HOME_DAYS, min_repos=2, limit=HOME_TOP)
        _state.renders += 1
        html = environment.get_template("site/_home_infestations.html").render(
            etag=etag,
            items=items,
            constellation=constellation_layout(items, limit=HOME_TOP),
            poll_seconds=POLL_SECONDS,
        )
        result = Rendered(etag=etag, html=html, items=items)
        _state.rendered = result
        return result
