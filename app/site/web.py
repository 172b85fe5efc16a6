"""Shared plumbing of the public pages: rendering with the right headers, JSON twins, htmx detection, errors.

Every public HTML page announces its JSON twin (`Link: <...json>; rel="alternate"`), is cacheable for a short
while by shared caches, and 404s are cached only briefly so a page that appears later is not hidden for long.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import date, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.accounts.sessions import current_account, session_token
from app.infestations.svg import finding_path, infestation_path, repo_path
from app.kernel.templating import environment, templates
from app.reports.queries import ANONYMOUS, Viewer

PUBLIC_CACHE = "public, max-age=30"
ERROR_CACHE = "public, max-age=5"
PRIVATE_CACHE = "private, no-store"  # what a privileged viewer sees must never sit in a shared cache

PRIVILEGED_ROLES = ("moderator", "admin")
ACTING_STATES = ("probation", "active")


async def viewer_for(request: Request) -> Viewer:
    """Who is looking: anonymous unless a session cookie names a live session. Platform reviewers, moderators and
    admins see restricted and summary-only reports and quarantined repositories in full (domain §1.1-1.2)."""
    if session_token(request) is None:
        return ANONYMOUS  # public pages without a cookie never touch the sessions table
    account = await current_account(request)
    if account is None:
        return ANONYMOUS
    privileged = account.state in ACTING_STATES and (
        account.platform_role in PRIVILEGED_ROLES or account.trust_tier == "reviewer"
    )
    return Viewer(account_id=account.id, privileged=privileged)


def cache_for(viewer: Viewer) -> str:
    return PRIVATE_CACHE if viewer.privileged else PUBLIC_CACHE


# Template helpers (autoescaping still applies to what they return: they return plain str).
environment.globals.update(repo_path=repo_path, infestation_path=infestation_path, finding_path=finding_path)


def jsonable(value: Any) -> Any:
    """ISO 8601 datetimes and string UUIDs, recursively (JSON twins)."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def is_fragment_request(request: Request) -> bool:
    """An htmx swap asks for the fragment; a history restore (back button, cache miss) needs the full page."""
    return request.headers.get("HX-Request") == "true" and request.headers.get("HX-History-Restore-Request") != "true"


def alternate_link(json_url: str) -> str:
    return f'<{json_url}>; rel="alternate"; type="application/json"'


def page(
    request: Request,
    name: str,
    context: dict[str, Any],
    *,
    status_code: int = 200,
    json_url: str | None = None,
    vary_hx: bool = False,
    cache: str = PUBLIC_CACHE,
) -> Response:
    headers = {"Cache-Control": cache}
    context = {**context, "json_url": json_url}  # the layout announces it in <head> too
    if json_url is not None:
        headers["Link"] = alternate_link(json_url)
    if vary_hx:
        headers["Vary"] = "HX-Request"
    return templates.TemplateResponse(request, name, context, status_code=status_code, headers=headers)


def json_twin(data: Any, *, status_code: int = 200, cache: str = PUBLIC_CACHE) -> JSONResponse:
    return JSONResponse(jsonable(data), status_code=status_code, headers={"Cache-Control": cache})


def error_page(request: Request, status_code: int, heading: str, message: str) -> Response:
    return page(
        request,
        "site/error.html",
        {"status_code": status_code, "heading": heading, "message": message},
        status_code=status_code,
        cache=ERROR_CACHE,
    )


def not_found(request: Request, message: str = "Nothing is recorded at this address.") -> Response:
    return error_page(request, 404, "Not found", message)


def json_error(status_code: int, field: str, message: str) -> JSONResponse:
    return JSONResponse({"errors": {field: [message]}}, status_code=status_code, headers={"Cache-Control": ERROR_CACHE})


def split_json_suffix(raw: str) -> tuple[str, bool]:
    """`abc.json` -> (`abc`, True); anything else -> (raw, False)."""
    if raw.endswith(".json") and len(raw) > len(".json"):
        return raw[: -len(".json")], True
    return raw, False
