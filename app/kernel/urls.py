"""Where things live: path builders for the public records, and `path_for` for named routes."""

from __future__ import annotations

import re
from urllib.parse import quote

from starlette.routing import Router

# what `quote(text, safe="")` leaves as it is: most hosts, owners, names and ids, answered without a call to quote
_UNRESERVED = re.compile(r"[A-Za-z0-9_.~-]*")


def _seg(value: object) -> str:
    text = str(value)
    return text if _UNRESERVED.fullmatch(text) else quote(text, safe="")


def infestation_path(pattern_key: str) -> str:
    return f"/infestations/{_seg(pattern_key)}"


def repo_path(host: object, owner: object, name: object) -> str:
    """Public path of a repository page."""
    return f"/repos/{_seg(host)}/{_seg(owner)}/{_seg(name)}"


def finding_path(occurrence_public_id: object) -> str:
    return f"/findings/{_seg(occurrence_public_id)}"


def static_path(file: str) -> str:
    """A file under /static (its slashes kept)."""
    return "/static/" + quote(file.lstrip("/"))


def twin_path(path: str) -> str:
    """The JSON twin of a page path (the one format rule: the `.json` suffix), query string kept."""
    base, sep, query = path.partition("?")
    return f"{base}.json{sep}{query}"


_router: Router | None = None


def install(router: Router) -> None:
    global _router
    _router = router


def path_for(name: str, /, **params: object) -> str:
    """The path of the route named `name`, its parameters percent-encoded (`format` is passed as is: "" for the
    page, ".json" for its twin)."""
    if _router is None:
        raise RuntimeError("no application installed its routes")
    encoded = {k: v if k == "format" else _seg(v) for k, v in params.items()}
    return str(_router.url_path_for(name, **encoded))
