"""OpenVEX out: `/repos/{host}/{owner}/{name}/vex.json`, a listed repository's current statements as one OpenVEX 0.2.0
document (docs/domain.md §14 "OpenVEX out")."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from msgspec import Meta, field
from starlette.requests import Request
from starlette.responses import Response

from app.kernel import db
from app.kernel.answers import UNSET, Answer, Timestamp, UnsetType, encode, iso
from app.kernel.config import settings
from app.kernel.errors import NotFound
from app.kernel.shared_cache import repository_tag
from app.kernel.urls import finding_path, repo_path
from app.kernel.web import document_response
from app.maintainers.access import listed_repository_query
from app.maintainers.statement_queries import FindingStatementRow, repository_statements, statement_events
from app.maintainers.statement_types import VexJustification, VexStatus
from app.registry.models import Repository

VEX_MEDIA_TYPE = "application/json"  # OpenVEX has no media type of its own
CONTEXT = "https://openvex.dev/ns/v0.2.0"
ROLE = "Registry publishing the statements of the repository's verified maintainers"
TOOLING = "Tarakan"
PURL_HOSTS = {"github.com": "github"}  # the only forge with a purl type (purl-spec: pkg:github/owner/name)
NOT_FOUND = "No listed repository with a maintainer's current statement is recorded at this address."


class VexIdentifiers(Answer):
    purl: str


class VexProduct(Answer):
    """The repository."""

    id: Annotated[str, Meta(description="pkg:github/owner/name on GitHub, else the repository's URL")] = field(
        name="@id"
    )
    identifiers: VexIdentifiers | UnsetType = UNSET


class VexVulnerability(Answer):
    """The finding."""

    id: Annotated[str, Meta(description="the finding's page")] = field(name="@id")
    name: Annotated[str, Meta(description="the canonical finding's public id")]
    description: Annotated[str, Meta(description="the finding's title")]


class VexStatement(Answer):
    vulnerability: VexVulnerability
    timestamp: Timestamp
    products: list[VexProduct]
    status: VexStatus
    justification: VexJustification | UnsetType = UNSET
    impact_statement: str | UnsetType = UNSET
    action_statement: str | UnsetType = UNSET
    status_notes: str | UnsetType = UNSET


class VexDocument(Answer):
    """An OpenVEX 0.2.0 document: a listed repository's current maintainer statements."""

    context: str = field(name="@context")
    id: Annotated[str, Meta(description="this document's address")] = field(name="@id")
    author: str
    role: str
    timestamp: Timestamp
    version: Annotated[int, Meta(ge=1, description="grows with every statement and every moderator's hide or show")]
    tooling: str
    statements: list[VexStatement]


def product(repository: Repository) -> VexProduct:
    purl_type = PURL_HOSTS.get(repository.host)
    if purl_type is None:
        return VexProduct(id=repository.canonical_url)
    purl = f"pkg:{purl_type}/{repository.owner}/{repository.name}"
    return VexProduct(id=purl, identifiers=VexIdentifiers(purl=purl))


def vex_statement(row: FindingStatementRow, products: list[VexProduct], base_url: str) -> VexStatement:
    s = row.statement
    notes: list[str] = []
    impact: str | UnsetType = UNSET
    if s.impact_statement is not None:
        if s.justification is not None:  # OpenVEX takes one of the two: the justification stays
            notes.append(f"Impact statement: {s.impact_statement}")
        else:
            impact = s.impact_statement
    if s.fixed_in is not None:
        notes.append(f"Fixed in commit {s.fixed_in}.")
    return VexStatement(
        vulnerability=VexVulnerability(
            id=base_url + finding_path(row.occurrence), name=row.statement.canonical, description=row.title
        ),
        timestamp=iso(s.at) or "",
        products=products,
        status=s.status,
        justification=s.justification if s.justification is not None else UNSET,
        impact_statement=impact,
        action_statement=s.action_statement if s.action_statement is not None else UNSET,
        status_notes="\n".join(notes) if notes else UNSET,
    )


def vex_document(
    repository: Repository, rows: list[FindingStatementRow], *, version: int, updated: datetime
) -> VexDocument:
    base_url = settings().base_url
    products = [product(repository)]
    return VexDocument(
        context=CONTEXT,
        id=base_url + repo_path(repository.host, repository.owner, repository.name) + "/vex.json",
        author=f"Tarakan ({base_url})",
        role=ROLE,
        timestamp=iso(updated) or "",
        version=max(1, version),
        tooling=TOOLING,
        statements=[vex_statement(row, products, base_url) for row in rows],
    )


async def listed_repository(host: str, owner: str, name: str) -> Repository | None:
    query = listed_repository_query(host, owner, name)
    if query is None:
        return None
    async with db.read_session() as session:
        repository = (await session.execute(query)).scalar_one_or_none()
        if repository is not None:
            session.expunge(repository)
    return repository


async def vex_json(request: Request) -> Response:
    p = request.path_params
    repository = await listed_repository(p["host"], p["owner"], p["name"])
    rows = await repository_statements(repository.id) if repository is not None else []
    if repository is None or not rows:
        raise NotFound({"repository": ["no current maintainer statement"]}, message=NOT_FOUND)
    version, updated = await statement_events(repository.id)
    newest = max(row.statement.at for row in rows)
    document = vex_document(repository, rows, version=version, updated=max(newest, updated or newest))
    return document_response(request, encode(document), VEX_MEDIA_TYPE, tags=[repository_tag(repository.id)])
