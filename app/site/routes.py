"""Home page, its JSON twin, the shared home infestation fragment, and the record pages (`app.site.records`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from app.infestations.rows import Infestation, as_answer
from app.kernel.answers import iso
from app.kernel.shared_cache import ATLAS_TAG, pattern_tag, repository_tag
from app.kernel.templating import Drawn, rows_key
from app.kernel.web import cache_headers, etag_matches, json_twin, page, wants_json
from app.record.rendered import rendered_once
from app.registry.stats import registry_stats
from app.reports.queries import list_recent_public_reports
from app.site import badge, home_infestations, openapi, records, sarif, statements
from app.site.types import Home, HomeStats, RecentReport

RECENT_REPORTS = 10
_recent_reports = Drawn("site/_recent_reports.html")  # a list's markup is a function of its rows alone
# The polled fragment: browsers revalidate at every poll (a 304 while unchanged); the shared cache keeps it until a
# takedown or a rollup refresh purges `atlas`.
FRAGMENT_CACHE = "public, max-age=0"


def _home_tags(fragment: home_infestations.Rendered, reports: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    """`atlas`, the listed patterns, and the repository of each recent report (a report's takedown purges its
    repository's tag, and `atlas` only when the report fed the atlas)."""
    return [
        ATLAS_TAG,
        *(pattern_tag(item["pattern_key"]) for item in fragment.items),
        *(repository_tag(report["repository_id"]) for report in reports),
    ]


def _path(request: Request) -> str:
    path: str = request.scope["path"]  # the home page reads no parameter (the scope's path: no URL object built)
    return path


@rendered_once(_path)
async def home(request: Request) -> Response:
    fragment = await home_infestations.current()
    reports = await list_recent_public_reports(limit=RECENT_REPORTS)
    if not wants_json(request):
        context = {
            "stats": await registry_stats(),
            "infestations_html": Markup(fragment.html),  # rendered by an autoescaping template
            "reports": reports,
            "recent_reports": _recent_reports(rows_key(reports), lambda: {"reports": reports}),
        }
        return page(request, "site/home.html", context, json_url="/index.json", tags=_home_tags(fragment, reports))
    return json_twin(
        Home(
            stats=HomeStats(**await registry_stats()),
            infestations=[as_answer(Infestation, item) for item in fragment.items],
            recent_reports=[
                RecentReport(
                    id=r["id"],
                    repository=f"{r['owner']}/{r['name']}",
                    host=r["host"],
                    commit_sha=r["commit_sha"],
                    provenance=r["provenance"],
                    model=r["model"],
                    visibility=r["visibility"],
                    # a summary-only report shows its header, not how many findings it holds
                    findings_count=r["findings_count"] if r["access"] == "full" else None,
                    inserted_at=iso(r["inserted_at"]),
                )
                for r in reports
            ],
        ),
        tags=_home_tags(fragment, reports),
    )


@rendered_once(_path)
async def home_infestations_fragment(request: Request) -> Response:
    """Polled by every open home page: from the render cache, a 304 while its list is unchanged."""
    fragment = await home_infestations.current()
    headers = {"ETag": fragment.etag, **cache_headers(FRAGMENT_CACHE, _home_tags(fragment)), "Vary": "HX-Request"}
    if etag_matches(request, fragment.etag):
        return Response(status_code=304, headers=headers)
    return Response(fragment.html, media_type="text/html; charset=utf-8", headers=headers)


routes: list[BaseRoute] = [
    Route("/", home, methods=["GET", "HEAD"], name="home"),
    Route("/index{format:twin}", home, methods=["GET", "HEAD"], name="home_twin"),  # the twin of `/`
    Route("/fragments/home-infestations", home_infestations_fragment, methods=["GET", "HEAD"]),
    *records.routes,
    *statements.routes,  # the statement form of a finding page
    *sarif.routes,  # /repos/.../findings.sarif (docs/sarif.md)
    *badge.routes,  # /repos/.../badge.svg
    *openapi.routes,
]
