"""Claims and their verification: the API (`repositories:maintain`) and the signed-in maintain page (plain HTML forms);
every unsafe route is a `body_route` (docs/domain.md §14)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypedDict
from urllib.parse import quote

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from app.accounts.models import Account
from app.accounts.service import ApiCaller, bearer_caller, refused_subject, require_scope
from app.accounts.sessions import current_account
from app.kernel.actors import can_moderate
from app.kernel.answers import answer_response
from app.kernel.db import utcnow
from app.kernel.errors import DomainError, NotFound, Unauthorized, ValidationError
from app.kernel.forms import FormLimits, field
from app.kernel.intake import Body, Budget, body_route, form_parser, json_object
from app.kernel.paging import strict_limit
from app.kernel.text import ascii_int
from app.kernel.urls import repo_path
from app.kernel.web import PRIVATE_CACHE, page
from app.maintainers import embargoed, forge, queries, service, webhooks
from app.maintainers.types import (
    DisclosureClockAnswer,
    DisclosureWindow,
    DisclosureWindowAnswer,
    EmbargoedPage,
    claim_answer,
)
from app.record.observations import repository_latest
from app.registry.models import Repository
from app.registry.service import get_repository

MAINTAIN_SCOPE = "repositories:maintain"
MAX_BODY_BYTES = 1024  # the body is empty or {}
# the maintain page's forms: a claim id at most
MAINTAIN_FORM = FormLimits(max_fields=4, max_part_size=1024)


# --- API --------------------------------------------------------------------------------------------------------


async def _maintainer(request: Request) -> ApiCaller:
    caller = await bearer_caller(request.headers.get("authorization"))
    require_scope(caller.scopes, MAINTAIN_SCOPE)
    return caller


def parse_empty(body: Body, budget: Budget) -> None:
    """No body: nothing, or an empty JSON object."""
    if not body.raw.strip():
        return
    if json_object(body, budget):
        raise ValidationError({"body": ["must be empty or {} (this request takes no fields)"]})


async def create_claim(request: Request, caller: ApiCaller, _: None) -> Response:
    p = request.path_params
    view, created = await service.claim_repository(caller.account.id, p["host"], p["owner"], p["name"])
    return answer_response(claim_answer(view), status_code=201 if created else 200)


def _claim_id(raw: str) -> int:
    claim_id = ascii_int(raw)
    if claim_id is None or not 0 < claim_id < 2**63:
        raise NotFound({"claim": ["not found"]})
    return claim_id


async def verify_claim(request: Request, caller: ApiCaller, _: None) -> Response:
    view = await service.verify_claim(caller.account.id, _claim_id(request.path_params["claim_id"]))
    return answer_response(claim_answer(view))


# --- coordinated disclosure: the window, the embargoed findings, the acknowledgement ------------------------------


def _days(raw: object, *, typed: bool = False) -> int:
    """A window's days: a whole number 0-90, a form's digits or (`typed`) a JSON integer (422 naming `days`)."""
    if isinstance(raw, str) and not typed:
        raw = ascii_int(raw.strip()) if raw.strip() else None
    if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw <= embargoed.MAX_WINDOW_DAYS:
        raise ValidationError({"days": [f"must be a whole number of days from 0 to {embargoed.MAX_WINDOW_DAYS}"]})
    return raw


def parse_window(body: Body, budget: Budget) -> int:
    """`{"days": N}`, 0 <= N <= 90 (0: no window); 422 naming `days`, or the unknown field."""
    raw = json_object(body, budget)
    if unknown := sorted(set(raw) - set(DisclosureWindow.__struct_fields__)):
        raise ValidationError({key: ["is not a field of this request (it takes `days`)"] for key in unknown})
    if "days" not in raw:
        raise ValidationError({"days": ["is required: a whole number of days from 0 to 90"]})
    return _days(raw["days"], typed=True)


async def set_window(request: Request, caller: ApiCaller, days: int) -> Response:
    p = request.path_params
    repository, days = await embargoed.set_window(caller.account.id, p["host"], p["owner"], p["name"], days)
    return answer_response(DisclosureWindowAnswer(repository=slug_of(repository), disclosure_days=days))


async def embargoed_findings(request: Request) -> Response:
    caller = await _maintainer(request)
    p = request.path_params
    limit = strict_limit(request.query_params.get("limit"), default=embargoed.PAGE_DEFAULT, maximum=embargoed.PAGE_MAX)
    repository, page = await embargoed.embargoed_page(
        caller.account.id, p["host"], p["owner"], p["name"], cursor=request.query_params.get("cursor"), limit=limit
    )
    answer = EmbargoedPage(repository=slug_of(repository), items=page["entries"], next_cursor=page["next_cursor"])
    return answer_response(answer, headers={"Cache-Control": "private, no-store"})


async def acknowledge(request: Request, caller: ApiCaller, _: None) -> Response:
    disclosure = await embargoed.acknowledge(caller.account.id, request.path_params["canonical_public_id"])
    return answer_response(DisclosureClockAnswer(disclosure=disclosure))


def html_time(value: str) -> str:
    """An answer's ISO 8601 time as HTML's `<time datetime>` takes it (at most milliseconds)."""
    return datetime.fromisoformat(value).isoformat(timespec="milliseconds")


def slug_of(repository: Repository) -> str:
    return f"{repository.host}/{repository.owner}/{repository.name}"


# --- the maintain page ------------------------------------------------------------------------------------------


def maintain_path(host: str, owner: str, name: str) -> str:
    return repo_path(host, owner, name) + "/maintain"


async def _listed(host: str, owner: str, name: str) -> Repository:
    repository = await get_repository(host, owner, name)
    if repository is None or repository.listing_status != "listed":
        raise NotFound({"repository": ["not found"]}, message="No listed repository is recorded at this address.")
    return repository


async def _render(
    request: Request,
    account: Account,
    repository: Repository,
    *,
    errors: dict[str, list[str]] | None = None,
    status_code: int = 200,
    headers: dict[str, str] | None = None,
) -> Response:
    claim = await queries.pending_claim(repository.id, account.id)
    maintaining = await queries.is_current_maintainer(repository.id, account.id)
    told: list[Any] = []
    if maintaining:  # their view of the embargoed findings tells them (notified_at)
        _, shown = await embargoed.embargoed_page(
            account.id, repository.host, repository.owner, repository.name, cursor=None, limit=embargoed.PAGE_MAX
        )
        told = shown["entries"]
    context = {
        "account": account,
        "repository": repository,
        "repository_path": repo_path(repository.host, repository.owner, repository.name),
        "action": maintain_path(repository.host, repository.owner, repository.name),
        "maintainers": await queries.current_maintainers(repository.id, replica=False),
        "maintaining": maintaining,
        "embargoed": told,
        "html_time": html_time,
        "window_days": repository.disclosure_days,
        "window_max": embargoed.MAX_WINDOW_DAYS,
        "claim": claim,
        "claim_expired": claim is not None and claim.expires_at <= utcnow(),
        "verify_path": forge.VERIFY_PATH,
        "moderator": can_moderate(account),
        "webhooks": await webhooks.repository_webhooks(repository.id) if can_moderate(account) else [],
        "errors": errors or {},
        "verified": request.query_params.get("verified") == "1",
        "window_saved": request.query_params.get("window") == "1",
        "observed": await repository_latest(repository.id),
    }
    response = page(request, "maintainers/maintain.html", context, status_code=status_code, cache=PRIVATE_CACHE)
    response.headers.update(headers or {})
    return response


async def maintain_page(request: Request) -> Response:
    p = request.path_params
    account = await current_account(request)
    if account is None:
        target = maintain_path(p["host"], p["owner"], p["name"])
        return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)
    return await _render(request, account, await _listed(p["host"], p["owner"], p["name"]))


async def _signed_in(request: Request) -> Account:
    account = await current_account(request)
    if account is None:
        raise Unauthorized(
            {"session": ["log in to maintain a repository"]},
            title="Log in to maintain a repository",
            message="Your session has ended or you are not logged in.",
        )
    return account


async def claim_form(request: Request, account: Account, form: FormData) -> Response:
    p = request.path_params
    repository = await _listed(p["host"], p["owner"], p["name"])
    try:
        await service.claim_repository(account.id, repository.host, repository.owner, repository.name)
    except DomainError as exc:
        return await _render(request, account, repository, errors=exc.errors, status_code=exc.status_code)
    return RedirectResponse(maintain_path(repository.host, repository.owner, repository.name), status_code=303)


async def verify_form(request: Request, account: Account, form: FormData) -> Response:
    p = request.path_params
    repository = await _listed(p["host"], p["owner"], p["name"])
    here = maintain_path(repository.host, repository.owner, repository.name)
    try:
        await service.verify_claim(account.id, _claim_id(field(form, "claim_id")))
    except DomainError as exc:
        return await _render(
            request, account, repository, errors=exc.errors, status_code=exc.status_code, headers=exc.headers()
        )
    return RedirectResponse(here + "?verified=1", status_code=303)


async def window_form(request: Request, account: Account, form: FormData) -> Response:
    p = request.path_params
    repository = await _listed(p["host"], p["owner"], p["name"])
    try:
        await embargoed.set_window(
            account.id, repository.host, repository.owner, repository.name, _days(field(form, "days"))
        )
    except DomainError as exc:
        return await _render(request, account, repository, errors=exc.errors, status_code=exc.status_code)
    here = maintain_path(repository.host, repository.owner, repository.name)
    return RedirectResponse(here + "?window=1", status_code=303)


class MaintainerApi(TypedDict):
    """`body_route`'s caller for the maintainers' API: a bearer token's caller, refusals counted against it."""

    authenticate: Callable[[Request], Awaitable[ApiCaller]]
    allowance: Callable[[ApiCaller], str | None]


class _Form(TypedDict):
    authenticate: Callable[[Request], Awaitable[Account]]
    parse: Callable[[Body, Budget], FormData]


_FORM: _Form = {"authenticate": _signed_in, "parse": form_parser(MAINTAIN_FORM)}
_API: MaintainerApi = {"authenticate": _maintainer, "allowance": refused_subject}

routes: list[BaseRoute] = [
    body_route(
        "/api/v1/repos/{host}/{owner}/{name}/claims", create_claim, parse=parse_empty, limit=MAX_BODY_BYTES, **_API
    ),
    body_route("/api/v1/claims/{claim_id}/verify", verify_claim, parse=parse_empty, limit=MAX_BODY_BYTES, **_API),
    Route("/repos/{host}/{owner}/{name}/maintain", maintain_page, methods=["GET", "HEAD"], name="maintain"),
    body_route("/repos/{host}/{owner}/{name}/maintain/claim", claim_form, name="maintain_claim", **_FORM),
    body_route("/repos/{host}/{owner}/{name}/maintain/verify", verify_form, name="maintain_verify", **_FORM),
    body_route(
        "/api/v1/repos/{host}/{owner}/{name}/disclosure",
        set_window,
        method="PUT",
        parse=parse_window,
        limit=MAX_BODY_BYTES,
        **_API,
    ),
    Route("/api/v1/repos/{host}/{owner}/{name}/embargoed", embargoed_findings, methods=["GET"]),
    body_route(
        "/api/v1/findings/{canonical_public_id}/disclosure/acknowledge",
        acknowledge,
        parse=parse_empty,
        limit=MAX_BODY_BYTES,
        **_API,
    ),
    body_route("/repos/{host}/{owner}/{name}/maintain/disclosure", window_form, name="maintain_disclosure", **_FORM),
]
