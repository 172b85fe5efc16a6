"""The home page's infestation section as one shared, versioned fragment (docs/domain.md §13 "Home refresh
discipline")."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import msgspec

from app.infestations import queries
from app.infestations.constellation import constellation_layout
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
    renders: int = 0  # observability for tests and operators: how often the list query ran


_state = _State()
# The fragment's markup is a function of its list alone, which its ETag digests: a version that moved without
# changing the list (a report elsewhere, a statement) reuses the markup drawn for it (the constellation's layout
# and the table are most of a home page's render).
_HTML_KEPT = 8
_html: dict[str, str] = {}
# The list as JSON digests it for the ETag: the same rows give the same bytes in every process (keys in column
# order), at a sixth of repr()'s cost.
_encode = msgspec.json.Encoder().encode


def stats() -> dict[str, int]:
    return {"renders": _state.renders}


def clear() -> None:
    """Forget this process's counters and drawn fragments (tests)."""
    global _state
    _state = _State()
    _html.clear()


async def current() -> Rendered:
    """The fragment as it stands, with a strong ETag derived from what it lists (so an unchanged list keeps its tag
    whatever moved the render cache's version). Served from the render cache (app.record.rendered): the list query
    runs once per version, or once the kept fragment is MAX_AGE_SECONDS old, per process."""
    items = await queries.list_infestations(days=HOME_DAYS, min_repos=2, limit=HOME_TOP)
    _state.renders += 1
    digest = hashlib.sha256(_encode(items)).hexdigest()[:32]
    etag = f'"home-infestations-{digest}"'
    html = _html.get(etag)
    if html is None:
        html = environment.get_template("site/_home_infestations.html").render(
            etag=etag,
            items=items,
            constellation=constellation_layout(items, limit=HOME_TOP),
            poll_seconds=POLL_SECONDS,
        )
        if len(_html) >= _HTML_KEPT:
            _html.clear()
        _html[etag] = html
    return Rendered(etag=etag, html=html, items=items)
