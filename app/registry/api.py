"""JSON API for repositories: `POST /api/v1/repositories` registers one (bearer token)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from app.accounts.service import authenticate_bearer, require_scope
from app.kernel.config import settings
from app.kernel.limits import read_json_object
from app.registry.models import Repository
from app.registry.service import register_repository
from app.registry.validation import validate_repo_ref

REGISTER_SCOPES = ("repositories:write", "findings:submit")
# {"host","owner","name"} is tiny; anything much larger is not a registration
MAX_BODY_BYTES = 16 * 1024


def repository_url(repository: Repository) -> str:
    # owner and name are restricted to [a-z0-9._-], so the path needs no escaping
    return f"{settings().base_url}/repos/{repository.host}/{repository.owner}/{repository.name}"


def repository_json(repository: Repository) -> dict[str, Any]:
    return {
        "id": repository.id,
        "host": repository.host,
        "owner": repository.owner,
        "name": repository.name,
        "canonical_url": repository.canonical_url,
        "listing_status": repository.listing_status,
        "status": repository.status,
        "scan_count": repository.scan_count,
        "open_findings_count": repository.open_findings_count,
        "verified_findings_count": repository.verified_findings_count,
        "url": repository_url(repository),
    }


async def create_repository(request: Request) -> Response:
    account, scopes = await authenticate_bearer(request.headers.get("authorization"))
    require_scope(scopes, *REGISTER_SCOPES)
    body = await read_json_object(request, limit=MAX_BODY_BYTES, non_object_status=400)
    host, owner, name = validate_repo_ref(body.get("host"), body.get("owner"), body.get("name"))
    repository, created = await register_repository(host, owner, name, submitted_by_id=account.id)
    payload = repository_json(repository)
    if created:
        return JSONResponse(payload, status_code=201, headers={"Location": payload["url"]})
    return JSONResponse(payload, status_code=200)


routes: list[BaseRoute] = [Route("/api/v1/repositories", create_repository, methods=["POST"])]
