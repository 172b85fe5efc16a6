"""Home page, its JSON twin, and the shared home infestation fragment."""

from __future__ import annotations

from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from app.registry.stats import registry_stats
from app.reports.queries import list_recent_public_reports
from app.site import home_infestations
from app.site.web import json_twin, page

RECENT_REPORTS = 10


async def home(request: Request) -> Response:
    etag = await home_infestations.current_etag()
    fragment = await home_infestations.rendered(etag)
    context = {
        "stats": await registry_stats(),
        "infestations_html": Markup(fragment.html),  # rendered by an autoescaping template
        "reports": await list_recent_public_reports(limit=RECENT_REPORTS),
    }
    return page(request, "site/home.html", context, json_url="/index.json")


async def home_json(request: Request) -> Response:
    fragment = await home_infestations.rendered(await home_infestations.current_etag())
    reports = await list_recent_public_reports(limit=RECENT_REPORTS)
    return json_twin(
        {
            "stats": await registry_stats(),
            "infestations": fragment.items,
            "recent_reports": [
                {
                    "id": r["id"],
                    "repository": f"{r['owner']}/{r['name']}",
                    "host": r["host"],
                    "commit_sha": r["commit_sha"],
                    "provenance": r["provenance"],
                    "model": r["model"],
                    "visibility": r["visibility"],
                    # a summary-only report shows its header, not how many findings it holds
                    "findings_count": r["findings_count"] if r["access"] == "full" else None,
                    "inserted_at": r["inserted_at"],
                }
                for r in reports
            ],
        }
    )


async def home_infestations_fragment(request: Request) -> Response:
    """Polled by every open home page: 304 on an unchanged version before any list query runs."""
    etag = await home_infestations.current_etag()
    headers = {"ETag": etag, "Cache-Control": "no-cache", "Vary": "HX-Request"}
    if home_infestations.etag_matches(request.headers.get("If-None-Match"), etag):
        return Response(status_code=304, headers=headers)
    fragment = await home_infestations.rendered(etag)
    return Response(fragment.html, media_type="text/html; charset=utf-8", headers=headers)


routes: list[BaseRoute] = [
    Route("/", home, methods=["GET", "HEAD"]),
    Route("/index.json", home_json, methods=["GET", "HEAD"]),
    Route("/fragments/home-infestations", home_infestations_fragment, methods=["GET", "HEAD"]),
]
