"""The maintainers' webhook API: register, list, show, delete, enable, the delivery log (docs/domain.md §14
"Webhooks"; bearer token with `repositories:maintain`; unsafe routes are `body_route`s)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from app.accounts.service import ApiCaller, bearer_caller, refused_subject, require_scope
from app.kernel.answers import answer_response
from app.kernel.errors import NotFound, ValidationError
from app.kernel.intake import Body, Budget, body_route, json_object
from app.kernel.paging import strict_limit
from app.kernel.text import ascii_int
from app.maintainers import destinations, webhooks
from app.maintainers.routes import MAINTAIN_SCOPE, MaintainerApi, parse_empty
from app.maintainers.webhook_types import (
    WebhookAnswer,
    WebhookList,
    delivery_page,
    new_webhook_answer,
    webhook,
)

MAX_BODY_BYTES = 4096  # {"url": ...} with a URL of at most 2,000 characters


async def _maintainer(request: Request) -> ApiCaller:
    caller = await bearer_caller(request.headers.get("authorization"))
    require_scope(caller.scopes, MAINTAIN_SCOPE)
    return caller


def parse_registration(body: Body, budget: Budget) -> str:
    """The URL of `{"url": "https://..."}`, checked as far as it can be without asking DNS (422 naming `url`)."""
    raw = json_object(body, budget)
    url = raw.get("url")
    if not isinstance(url, str):
        raise ValidationError({"url": ["is required: the https URL to POST the repository's entries to"]})
    try:
        destinations.parse(url)
    except destinations.Refused as exc:
        raise ValidationError({"url": [str(exc)]}) from None
    return url


def _webhook_id(raw: str) -> int:
    webhook_id = ascii_int(raw)
    if webhook_id is None or not 0 < webhook_id < 2**63:
        raise NotFound({"webhook": ["not found"]})
    return webhook_id


async def register(request: Request, caller: ApiCaller, url: str) -> Response:
    p = request.path_params
    registered = await webhooks.register_webhook(caller.account.id, p["host"], p["owner"], p["name"], url)
    return answer_response(new_webhook_answer(registered), status_code=201)


async def list_webhooks(request: Request) -> Response:
    caller = await _maintainer(request)
    p = request.path_params
    found = await webhooks.list_webhooks(caller.account.id, p["host"], p["owner"], p["name"])
    return answer_response(WebhookList(webhooks=[webhook(view) for view in found]))


async def show(request: Request) -> Response:
    caller = await _maintainer(request)
    view = await webhooks.get_webhook(caller.account.id, _webhook_id(request.path_params["webhook_id"]))
    return answer_response(WebhookAnswer(webhook=webhook(view)))


async def remove(request: Request, caller: ApiCaller, _: None) -> Response:
    await webhooks.delete_webhook(caller.account.id, _webhook_id(request.path_params["webhook_id"]))
    return Response(status_code=204)


async def enable(request: Request, caller: ApiCaller, _: None) -> Response:
    view = await webhooks.enable_webhook(caller.account.id, _webhook_id(request.path_params["webhook_id"]))
    return answer_response(WebhookAnswer(webhook=webhook(view)))


async def deliveries(request: Request) -> Response:
    caller = await _maintainer(request)
    webhook_id = _webhook_id(request.path_params["webhook_id"])
    limit = strict_limit(
        request.query_params.get("limit"), default=webhooks.DEFAULT_LOG_PAGE, maximum=webhooks.MAX_LOG_PAGE
    )
    page = await webhooks.deliveries_page(
        caller.account.id, webhook_id, cursor=request.query_params.get("cursor"), limit=limit
    )
    return answer_response(delivery_page(page))


_API: MaintainerApi = {"authenticate": _maintainer, "allowance": refused_subject}

routes: list[BaseRoute] = [
    body_route(
        "/api/v1/repos/{host}/{owner}/{name}/webhooks",
        register,
        parse=parse_registration,
        limit=MAX_BODY_BYTES,
        **_API,
    ),
    Route("/api/v1/repos/{host}/{owner}/{name}/webhooks", list_webhooks, methods=["GET"]),
    Route("/api/v1/webhooks/{webhook_id}", show, methods=["GET"]),
    body_route("/api/v1/webhooks/{webhook_id}", remove, method="DELETE", parse=parse_empty, limit=1024, **_API),
    body_route("/api/v1/webhooks/{webhook_id}/enable", enable, parse=parse_empty, limit=1024, **_API),
    Route("/api/v1/webhooks/{webhook_id}/deliveries", deliveries, methods=["GET"]),
]
