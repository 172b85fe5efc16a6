"""Report API (bearer token): submit reports, record checks and report-level verdicts. Thin: read a capped
JSON body, authenticate, call the service, answer 201."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from app.accounts.models import Account
from app.accounts.service import authenticate_bearer
from app.kernel.config import settings
from app.kernel.errors import DomainError, NotFound, ValidationError
from app.reports import service


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


async def read_json_object(request: Request) -> dict[str, Any]:
    """The request body as a JSON object, read with a cap of `request_body_limit` bytes (413 beyond it)."""
    limit = settings().request_body_limit
    too_large = DomainError({"body": [f"must be at most {limit} bytes"]}, status_code=413)
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > limit:
            raise too_large
    try:
        body = json.loads(bytes(data), parse_constant=_reject_constant)
    except ValueError:  # includes JSONDecodeError and UnicodeDecodeError
        raise DomainError({"body": ["must be valid JSON"]}, status_code=400) from None
    if not isinstance(body, dict):
        raise ValidationError({"body": ["must be a JSON object"]})
    return body


async def authenticate(request: Request) -> tuple[Account, frozenset[str]]:
    return await authenticate_bearer(request.headers.get("authorization"))


def _client_ip(request: Request) -> str | None:
    return request.client.host if request.client else None


async def submit_report(request: Request) -> JSONResponse:
    """201 with the new report; 200 with the stored one when this is a retry of a run already stored (the same
    `run_id`, repository and content: the first answer was lost, docs/reliability.md "Retries")."""
    account, scopes = await authenticate(request)
    body = await read_json_object(request)
    p = request.path_params
    result, created = await service.submit_report_once(
        account, p["host"], p["owner"], p["name"], body, client_ip=_client_ip(request), scopes=scopes
    )
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
    raw_id = request.path_params["scan_id"]
    if not raw_id.isdigit() or len(raw_id) > 18:
        raise NotFound({"report": ["not found"]})
    result = await service.record_confirmation(account, int(raw_id), body, client_ip=_client_ip(request), scopes=scopes)
    return JSONResponse(result, status_code=201)


routes: list[BaseRoute] = [
    Route("/api/v1/repos/{host}/{owner}/{name}/reports", submit_report, methods=["POST"]),
    Route("/api/v1/findings/{canonical_public_id}/checks", record_check, methods=["POST"]),
    Route("/api/v1/reports/{scan_id}/confirmations", record_confirmation, methods=["POST"]),
]
