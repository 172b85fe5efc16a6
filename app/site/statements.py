"""The finding page's statement form (`POST /findings/{ref}/statements`): the API's rules and service behind a plain
HTML form (docs/domain.md §14)."""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute

from app.accounts.models import Account
from app.accounts.sessions import current_account
from app.kernel.errors import NotFound, Unauthorized, ValidationError
from app.kernel.forms import FormLimits
from app.kernel.forms import field as form_field
from app.kernel.intake import Body, Budget, body_route, form_parser
from app.kernel.urls import finding_path
from app.maintainers.statement_queries import current_statement
from app.maintainers.statements import StatementInput, prepare_statement, record_statement, take_allowance
from app.site.records import StatementForm, load_finding, render_finding

FIELDS = ("status", "justification", "impact_statement", "action_statement", "fixed_in")
STATEMENT_FORM = FormLimits(max_fields=8, max_part_size=8 * 1024)
_parse_form = form_parser(STATEMENT_FORM)


@dataclass(frozen=True)
class Typed:
    """The form as typed, and the statement it makes or the errors that refuse it."""

    values: dict[str, str]
    statement: StatementInput | None
    errors: dict[str, list[str]] = field(default_factory=dict)


def parse_statement_form(body: Body, budget: Budget) -> Typed:
    values = {name: form_field(_parse_form(body, budget), name) for name in FIELDS}
    try:
        return Typed(values, prepare_statement(values, budget))
    except ValidationError as exc:
        return Typed(values, None, exc.errors)


async def _signed_in(request: Request) -> Account:
    account = await current_account(request)
    if account is None:
        raise Unauthorized(
            {"session": ["log in to state on a finding"]},
            title="Log in to state on a finding",
            message="Your session has ended or you are not logged in.",
        )
    return account


async def statement_form(request: Request, account: Account, typed: Typed) -> Response:
    viewer, finding = await load_finding(request, request.path_params["ref"])
    if finding is None or finding["canonical_id"] is None:  # unlinked: no canonical finding to state on
        raise NotFound({"finding": ["not found"]}, message="No public finding is recorded at this address.")
    here = finding_path(finding["public_id"])
    errors = typed.errors
    if typed.statement is not None:
        await take_allowance(account.id)
        try:
            await record_statement(account.id, str(finding["canonical_public_id"]), typed.statement)
        except ValidationError as exc:  # 403 and 404 are the error page: this account has no form here
            errors = exc.errors
        else:
            return RedirectResponse(here + "?stated=1#maintainer-statement", status_code=303)
    statement = await current_statement(finding["canonical_id"])
    form = StatementForm(values=typed.values, errors=errors)
    return await render_finding(request, viewer, finding, statement, form=form, status_code=422)


routes: list[BaseRoute] = [
    body_route(
        "/findings/{ref}/statements",
        statement_form,
        authenticate=_signed_in,
        parse=parse_statement_form,
        name="finding_statement",
    ),
]
