"""Public registry pages: a repository's record, a finding, and search; each with its JSON twin.

Visibility is decided in one place (`app.reports.queries.report_access` / `repository_visible`); these handlers
only render what it allows. Unknown, hidden and malformed addresses are all the same 404.
"""

from __future__ import annotations

import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from app.infestations.queries import list_repository_infestations
from app.infestations.svg import finding_path, repo_path
from app.registry import queries
from app.reports.queries import Viewer, get_finding, list_repository_reports, repository_visible
from app.site.web import cache_for, json_error, json_twin, not_found, page, split_json_suffix, viewer_for

REPOSITORY_REPORTS = 20
REPOSITORY_INFESTATIONS = 50

_PUBLIC_REPOSITORY_FIELDS = (
    "host",
    "owner",
    "name",
    "canonical_url",
    "status",
    "scan_count",
    "open_findings_count",
    "verified_findings_count",
    "last_scanned_at",
    "description",
    "primary_language",
    "stars_count",
    "forks_count",
    "archived",
    "participation_mode",
    "listing_status",
)


async def _visible_repository(viewer: Viewer, host: str, owner: str, name: str) -> dict[str, Any] | None:
    repository = await queries.get_repository(host.lower(), owner.lower(), name.lower())
    if repository is None or not repository_visible(viewer, repository["listing_status"]):
        return None
    return repository


async def repository_page(request: Request) -> Response:
    host, owner, raw_name = (request.path_params[k] for k in ("host", "owner", "name"))
    # A repository may itself be named `x.json`: the exact name wins, `x.json` is then the twin of `x` only when
    # no repository carries that name (and `x.json.json` is always the twin of `x.json`).
    viewer = await viewer_for(request)
    repository = await _visible_repository(viewer, host, owner, raw_name)
    as_json = False
    if repository is None:
        name, as_json = split_json_suffix(raw_name)
        if as_json:
            repository = await _visible_repository(viewer, host, owner, name)
    if repository is None:
        if as_json:
            return json_error(404, "repository", "not found")
        return not_found(request, "No repository is recorded at this address.")
    reports = await list_repository_reports(
        repository["id"], repository["listing_status"], viewer=viewer, limit=REPOSITORY_REPORTS
    )
    infestations = await list_repository_infestations(repository["id"], limit=REPOSITORY_INFESTATIONS)
    path = repo_path(repository["host"], repository["owner"], repository["name"])
    if as_json:
        return json_twin(
            {
                "repository": {k: repository[k] for k in _PUBLIC_REPOSITORY_FIELDS} | {"url": path},
                "reports": [_report_json(r) for r in reports],
                "infestations": infestations,
            },
            cache=cache_for(viewer),
        )
    context = {
        "repository": repository,
        "reports": reports,
        "infestations": infestations,
        "external_url": repository["canonical_url"] if repository["canonical_url"].startswith("https://") else None,
    }
    json_url = f"{path}.json"
    return page(request, "registry/repository.html", context, json_url=json_url, cache=cache_for(viewer))


def _report_json(report: dict[str, Any]) -> dict[str, Any]:
    header = {
        "id": report["id"],
        "commit_sha": report["commit_sha"],
        "model": report["model"],
        "provenance": report["provenance"],
        "review_kind": report["review_kind"],
        "review_status": report["review_status"],
        "visibility": report["visibility"],
        "inserted_at": report["inserted_at"],
    }
    if report["access"] != "full":
        return header  # summary-only: the header, nothing about its findings
    return header | {
        "findings_count": report["findings_count"],
        "findings": [
            {
                "public_id": f["public_id"],
                "title": f["title"],
                "severity": f["severity"],
                "file_path": f["file_path"],
                "line_start": f["line_start"],
                "line_end": f["line_end"],
                "status": f["status"],
                "pattern_key": f["pattern_key"],
                "url": finding_path(f["public_id"]),
            }
            for f in report["findings"]
        ],
    }


def _parse_public_id(raw: str) -> uuid.UUID | None:
    try:
        parsed = uuid.UUID(raw)
    except ValueError:
        return None
    return parsed if str(parsed) == raw else None  # one address per finding: canonical lowercase form


async def finding_page(request: Request) -> Response:
    raw, as_json = split_json_suffix(request.path_params["ref"])
    public_id = _parse_public_id(raw)
    viewer = await viewer_for(request)
    finding = await get_finding(public_id, viewer=viewer) if public_id is not None else None
    if finding is None:
        if as_json:
            return json_error(404, "finding", "not found")
        return not_found(request, "No public finding is recorded at this address.")
    if as_json:
        return json_twin(
            {
                "finding": {
                    "public_id": finding["public_id"],
                    "title": finding["title"],
                    "severity": finding["severity"],
                    "file_path": finding["file_path"],
                    "line_start": finding["line_start"],
                    "line_end": finding["line_end"],
                    "description": finding["description"],
                    "disposition": finding["disposition"],
                    "status": finding["status"],
                    "canonical_public_id": finding["canonical_public_id"],
                    "confirmations_count": finding["confirmations_count"],
                    "disputes_count": finding["disputes_count"],
                    "pattern_key": finding["pattern_key"],
                    "commit_sha": finding["commit_sha"],
                    "reported_at": finding["reported_at"],
                    "repository": {"host": finding["host"], "owner": finding["owner"], "name": finding["name"]},
                },
                "checks": finding["checks"],
            },
            cache=cache_for(viewer),
        )
    context = {"finding": finding}
    json_url = f"{finding_path(finding['public_id'])}.json"
    return page(request, "reports/finding.html", context, json_url=json_url, cache=cache_for(viewer))


def _search_limit(raw: str | None) -> int:
    try:
        return max(1, min(int(raw or queries.SEARCH_DEFAULT), queries.SEARCH_MAX))
    except ValueError:
        return queries.SEARCH_DEFAULT


async def search(request: Request) -> Response:
    raw_query = request.query_params.get("q", "")
    query = queries.normalize_query(raw_query)
    limit = _search_limit(request.query_params.get("limit"))
    results = await queries.search_repositories(query, limit=limit)
    json_url = "/search.json?" + str(request.query_params) if request.query_params else "/search.json"
    if request.url.path.endswith(".json"):
        return json_twin(
            {
                "query": query,
                "items": [
                    {k: r[k] for k in _PUBLIC_REPOSITORY_FIELDS} | {"url": repo_path(r["host"], r["owner"], r["name"])}
                    for r in results
                ],
            }
        )
    context = {"query": query, "results": results, "limit": limit}
    return page(request, "registry/search.html", context, json_url=json_url)


routes: list[BaseRoute] = [
    Route("/repos/{host}/{owner}/{name}", repository_page, methods=["GET", "HEAD"]),
    Route("/findings/{ref}", finding_page, methods=["GET", "HEAD"]),
    Route("/search", search, methods=["GET", "HEAD"]),
    Route("/search.json", search, methods=["GET", "HEAD"]),
]
