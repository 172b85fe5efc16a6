"""JSON API for repositories: `POST /api/v1/repositories` registers one (bearer token)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from app.accounts.service import ApiCaller, bearer_caller, refused_subject, require_scope
from app.kernel.answers import answer_response
from app.kernel.config import settings
from app.kernel.intake import Body, Budget, body_route, json_object
from app.registry import models
from app.registry.service import register_repository
from app.registry.types import Repository
from app.registry.validation import validate_repo_ref

REGISTER_SCOPES = ("repositories:write", "findings:submit")
# {"host","owner","name"} is tiny; anything much larger is not a registration
MAX_BODY_BYTES = 16 * 1024


def repository_url(repository: models.Repository) -> str:
    # owner and name are restricted to [a-z0-9._-], so the path needs no escaping
    return f"{settings().base_url}/repos/{repository.host}/{repository.owner}/{repository.name}"


def repository_json(repository: models.Repository) -> Repository:
    return Repository(
        id=repository.id,
        host=repository.host,
        owner=repository.owner,
        name=repository.name,
        canonical_url=repository.canonical_url,
        listing_status=repository.listing_status,
        status=repository.status,
        scan_count=repository.scan_count,
        open_findings_count=repository.open_findings_count,
        verified_findings_count=repository.verified_findings_count,
        url=repository_url(repository),
        default_branch=repository.default_branch,
        description=repository.description,
        primary_language=repository.primary_language,
        stars_count=repository.stars_count,
        metadata=repository.metadata_state,
    )


async def _registrar(request: Request) -> ApiCaller:
    caller = await bearer_caller(request.headers.get("authorization"))
    require_scope(caller.scopes, *REGISTER_SCOPES)
    return caller


def parse_repository(body: Body, budget: Budget) -> tuple[str, str, str]:
    raw = json_object(body, budget, non_object_status=400)
    return validate_repo_ref(raw.get("host"), raw.get("owner"), raw.get("name"))


async def create_repository(request: Request, caller: ApiCaller, ref: tuple[str, str, str]) -> Response:
    repository, created = await register_repository(*ref, submitted_by_id=caller.account.id)
    payload = repository_json(repository)
    if created:
        return answer_response(payload, status_code=201, headers={"Location": payload.url})
    return answer_response(payload, status_code=200)


routes: list[BaseRoute] = [
    body_route(
        "/api/v1/repositories",
        create_repository,
        authenticate=_registrar,
        parse=parse_repository,
        allowance=refused_subject,
        limit=MAX_BODY_BYTES,
    )
]
