"""The home page's infestation section as one shared, versioned fragment (docs/domain.md §13 "Home refresh
discipline")."""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass
from typing import Any

from app.infestations import queries
from app.infestations.constellation import constellation_layout
from app.kernel import flags
from app.kernel import rendered as rendered_pages
from app.kernel.templating import environment

HOME_TOP = 12
HOME_DAYS = 30
POLL_SECONDS = 15


@dataclass(frozen=True)
class Rendered:
    etag: str
    html: str
    items: list[dict[str, Any]]


@dataclass
class _State:
    rendered: Rendered | None = None
    version_queries: int = 0  # observability for tests and operators: how often the version was computed
    renders: int = 0  # how often the list query ran


_state = _State()
_render_lock: asyncio.Lock | None = None


def _lock() -> asyncio.Lock:
    global _render_lock
    if _render_lock is None:
        _render_lock = asyncio.Lock()
    return _render_lock


def stats() -> dict[str, int]:
    return {"version_queries": _state.version_queries, "renders": _state.renders}


def clear() -> None:
    """Forget the cached fragment of this process (tests; after a deploy)."""
    global _state
    _state = _State()


async def current_etag() -> str:
    """The strong ETag of the current fragment: the render cache's version (app.kernel.rendered: takedowns, the
    change feed, reports, rollup refreshes), its time bucket and the read flag. The fragment route is served from
    the render cache, so this runs only when the version moved."""
    version, _ = await rendered_pages.current_version()
    _state.version_queries += 1
    bucket = int(time.time() // rendered_pages.BUCKET_SECONDS)
    text = "|".join(str(v) for v in (*version, bucket, await flags.read_from_rollup()))
    return f'"home-infestations-{hashlib.sha256(text.encode()).hexdigest()[:32]}"'


async def rendered(etag: str) -> Rendered:
    """The fragment for `etag`, rendered once per version per process."""
    current = _state.rendered
    if current is not None and current.etag == etag:
        return current
    async with _lock():
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
