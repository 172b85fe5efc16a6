"""The statement API (`repositories:maintain`, a `body_route`: docs/security.md "Body budget") and a repository's
OpenVEX document."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from app.accounts.service import ApiCaller, bearer_caller, refused_subject, require_scope
from app.kernel.answers import answer_response
from app.kernel.intake import Body, Budget, body_route, json_object
from app.maintainers import statements, vex
from app.maintainers.routes import MAINTAIN_SCOPE
from app.maintainers.statement_types import statement_answer

MAX_BODY_BYTES = 16 * 1024  # two texts of at most 2,000 characters, and short fields


async def _maintainer(request: Request) -> ApiCaller:
    caller = await bearer_caller(request.headers.get("authorization"))
    require_scope(caller.scopes, MAINTAIN_SCOPE)
    return caller


def parse_statement(body: Body, budget: Budget) -> statements.StatementInput:
    return statements.prepare_statement(json_object(body, budget), budget)


async def create_statement(request: Request, caller: ApiCaller, statement: statements.StatementInput) -> Response:
    await statements.take_allowance(caller.account.id)
    view = await statements.record_statement(caller.account.id, request.path_params["canonical_public_id"], statement)
    return answer_response(statement_answer(view), status_code=201)


routes: list[BaseRoute] = [
    body_route(
        "/api/v1/findings/{canonical_public_id}/statements",
        create_statement,
        authenticate=_maintainer,
        parse=parse_statement,
        allowance=refused_subject,
        limit=MAX_BODY_BYTES,
    ),
    Route("/repos/{host}/{owner}/{name}/vex.json", vex.vex_json, methods=["GET", "HEAD"], name="vex"),
]
