"""Report API (bearer token): submit reports (one, or a batch), record checks and report-level verdicts. Each route
is a `body_route` (`app.kernel.intake`): the bearer check requires the route's scope (the one check of it), the body
is parsed, validated and scanned off the event loop (`app.reports.intake`), then the service opens its
transaction."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import msgspec
from sqlalchemy import text
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from app.accounts.service import ApiCaller, bearer_caller, refused_subject, remembered_bearer_caller
from app.kernel import db
from app.kernel.actors import is_privileged_viewer
from app.kernel.answers import answer_response
from app.kernel.errors import NotFound
from app.kernel.intake import Body, Budget, body_route, refused_window
from app.kernel.text import ascii_int
from app.kernel.web import PRIVATE_CACHE
from app.reports import batch, checks, intake, sarif, service
from app.reports.policy import SUBMIT_SCOPES, VERIFY_SCOPES, require_scope
from app.reports.serializers import report_response
from app.reports.validation import ReportInput, VerdictInput

T = TypeVar("T")


def _caller(needed: frozenset[str], *, remembered: bool = False) -> Callable[[Request], Awaitable[ApiCaller]]:
    """The bearer check before the body is read; `remembered`: a check passed in the last few seconds serves (the
    report routes only: their transaction checks the token again, `app.reports.policy.load_submitter`)."""
    check = remembered_bearer_caller if remembered else bearer_caller

    async def authenticate(request: Request) -> ApiCaller:
        caller = await check(request.headers.get("authorization"))
        require_scope(caller.scopes, needed)
        return caller

    return authenticate


def _client_ip(request: Request) -> str | None:
    return request.client.host if request.client else None


async def submit_report(
    request: Request, caller: ApiCaller, parsed: tuple[ReportInput, sarif.SarifReport | None]
) -> Response:
    """201 with the new report; 200 with the stored one when this is a retry of a run already stored (the same
    `run_id`, repository and content: the first answer was lost, docs/reliability.md "Retries")."""
    report, mapped = parsed
    p = request.path_params
    result, created = await service.store_report(
        caller.account, p["host"], p["owner"], p["name"], report, token_id=caller.token_id
    )
    if mapped is not None:
        result = msgspec.structs.replace(result, sarif=mapped.summary())
    return answer_response(result, status_code=201 if created else 200)


async def submit_batch(request: Request, caller: ApiCaller, parsed: batch.Batch) -> Response:
    """200 with one answer line per request line, in order (docs/domain.md §9 "Batches")."""
    subject = refused_subject(caller)
    allowance = None if subject is None else batch.Allowance(refused_window(), subject)
    answers = await batch.store_batch(caller.account, parsed, token_id=caller.token_id, allowance=allowance)
    return Response(batch.encode_lines(answers), media_type=batch.BATCH_MEDIA_TYPE)


async def record_check(request: Request, caller: ApiCaller, check: VerdictInput) -> Response:
    result = await checks.store_check(
        caller.account,
        request.path_params["canonical_public_id"],
        check,
        client_ip=_client_ip(request),
    )
    return answer_response(result, status_code=201)


async def record_confirmation(request: Request, caller: ApiCaller, verdict: VerdictInput) -> Response:
    scan_id = ascii_int(request.path_params["scan_id"])
    if scan_id is None:
        raise NotFound({"report": ["not found"]})
    result = await checks.store_confirmation(caller.account, scan_id, verdict, client_ip=_client_ip(request))
    return answer_response(result, status_code=201)


_SUBMITTER_OF = text("SELECT submitted_by_id FROM scans WHERE id = :id")
REPORT_NOT_FOUND = {"report": ["not found"]}


async def get_report(request: Request) -> Response:
    """`GET /api/v1/reports/{scan_id}`: a report as its submission answered, with each finding's evidence state
    now, for its submitter and privileged viewers (any scope); 404 for anyone else, as for a report never stored."""
    caller = await bearer_caller(request.headers.get("authorization"))
    scan_id = ascii_int(request.path_params["scan_id"])
    if scan_id is None or not 0 < scan_id < 2**63:
        raise NotFound(REPORT_NOT_FOUND)
    async with db.read_session(replica=False) as session:
        submitter = (await session.execute(_SUBMITTER_OF, {"id": scan_id})).scalar_one_or_none()
        if submitter is None or (submitter != caller.account.id and not is_privileged_viewer(caller.account)):
            raise NotFound(REPORT_NOT_FOUND)
        answer = await report_response(session, scan_id)
    return answer_response(answer, headers={"Cache-Control": PRIVATE_CACHE})


def _api_route(
    path: str,
    handle: Callable[[Request, ApiCaller, T], Awaitable[Response]],
    authenticate: Callable[[Request], Awaitable[ApiCaller]],
    parse: Callable[[Body, Budget], T],
) -> BaseRoute:
    """A report API route: its bearer check, then the body; a refused attempt counts against the caller."""
    return body_route(path, handle, authenticate=authenticate, parse=parse, allowance=refused_subject)


_SUBMITTER = _caller(SUBMIT_SCOPES, remembered=True)
_VERIFIER = _caller(VERIFY_SCOPES)

routes: list[BaseRoute] = [
    _api_route("/api/v1/repos/{host}/{owner}/{name}/reports", submit_report, _SUBMITTER, intake.parse_report),
    _api_route("/api/v1/reports/batch", submit_batch, _SUBMITTER, batch.parse_batch),
    _api_route("/api/v1/findings/{canonical_public_id}/checks", record_check, _VERIFIER, intake.parse_check),
    _api_route("/api/v1/reports/{scan_id}/confirmations", record_confirmation, _VERIFIER, intake.parse_confirmation),
    Route("/api/v1/reports/{scan_id}", get_report, methods=["GET", "HEAD"], name="report"),
]
