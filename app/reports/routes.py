"""Report API (bearer token): submit reports, record checks and report-level verdicts. Thin: read a capped
JSON body (`app.kernel.limits`), authenticate, call the service, answer 201."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from app.accounts.models import Account
from app.accounts.service import authenticate_bearer
from app.kernel.errors import NotFound
from app.kernel.limits import read_json_object
from app.kernel.text import ascii_int
from app.reports import sarif, service


async def authenticate(request: Request) -> tuple[Account, frozenset[str]]:
    return await authenticate_bearer(request.headers.get("authorization"))


def _client_ip(request: Request) -> str | None:
    return request.client.host if request.client else None


async def submit_report(request: Request) -> JSONResponse:
    """201 with the new report; 200 with the stored one when this is a retry of a run already stored (the same
    `run_id`, repository and content: the first answer was lost, docs/reliability.md "Retries")."""
    account, scopes = await authenticate(request)
    body = await read_json_object(request)
    sarif_report = None
    if request.headers.get("content-type", "").split(";")[0].strip().lower() == sarif.SARIF_MEDIA_TYPE:
        # a SARIF 2.1.0 log, mapped onto the same body (docs/sarif.md); the commit may come as a parameter
        sarif_report = sarif.sarif_to_report(body, commit_sha=request.query_params.get("commit_sha"))
        body = sarif_report.body
    p = request.path_params
    result, created = await service.submit_report_once(
        account, p["host"], p["owner"], p["name"], body, client_ip=_client_ip(request), scopes=scopes
    )
    if sarif_report is not None:
        result = result | {"sarif": sarif_report.summary()}
    return JSONResponse(result, status_code=201 if created else 200)


async def record_check(request: Request) -> JSONResponse:
    account, scopes = await authenticate(request)
    body = await read_json_object(request)
    result = await service.record_check(
        account, request.path_params["canonical_public_id"], body, client_ip=_client_ip(request), scopes=scopes
    )
    return JSONResponse(result, status_code=201)


async def record_confirmation(request: Request) -> JSONResponse:
    account, scopes = await authenticate(request)
    body = await read_json_object(request)
    scan_id = ascii_int(request.path_params["scan_id"])
    if scan_id is None:
        raise NotFound({"report": ["not found"]})
    result = await service.record_confirmation(account, scan_id, body, client_ip=_client_ip(request), scopes=scopes)
    return JSONResponse(result, status_code=201)


routes: list[BaseRoute] = [
    Route("/api/v1/repos/{host}/{owner}/{name}/reports", submit_report, methods=["POST"]),
    Route("/api/v1/findings/{canonical_public_id}/checks", record_check, methods=["POST"]),
    Route("/api/v1/reports/{scan_id}/confirmations", record_confirmation, methods=["POST"]),
]
