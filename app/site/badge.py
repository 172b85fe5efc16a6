"""`/repos/{host}/{owner}/{name}/badge.svg`: a shields-style README badge, counted as the repository metrics count
(docs/sarif.md)."""

from __future__ import annotations

from sqlalchemy import and_
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from app.kernel import db
from app.kernel.errors import NotFound
from app.kernel.shared_cache import repository_tag
from app.kernel.sql import statement
from app.kernel.templating import environment
from app.kernel.web import document_response
from app.record.public import listed_repository, published_occurrence, published_scan, scan_alias
from app.record.rendered import rendered_once
from app.site.sarif import NOT_PUBLIC, public_repository

SVG_TYPE = "image/svg+xml"
LABEL = "tarakan"
COLORS = {"open": "#e05d44", "clean": "#44cc11", "not scanned": "#9f9f9f"}
CHAR_WIDTH = 7  # Verdana 11px, roughly; shields measures glyphs, a badge this short needs no more
PADDING = 10

# the reports the repository metrics count (`app.registry.metrics`): summary-only findings are counted, not shown
_COUNTED_SCAN = and_(scan_alias.c.visibility.in_(("public", "public_summary")), published_scan())

_COUNTS = statement(
    """
SELECT
  (SELECT count(*) FROM canonical_findings c
   WHERE c.repository_id = r.id AND c.status <> 'fixed'
     AND EXISTS (SELECT 1 FROM scan_findings f JOIN scans s ON s.id = f.scan_id
                 WHERE f.canonical_finding_id = c.id AND {published} AND {counted})) AS open,
  EXISTS (SELECT 1 FROM scans s WHERE s.repository_id = r.id AND {counted}) AS scanned
FROM repositories r
WHERE r.id = :repository_id AND {listed}
""",
    counted=_COUNTED_SCAN,
    published=published_occurrence(),
    listed=listed_repository(),
)


def badge_svg(message: str, color: str) -> str:
    label_width = len(LABEL) * CHAR_WIDTH + PADDING
    message_width = len(message) * CHAR_WIDTH + PADDING
    return environment.get_template("site/badge.svg").render(
        label=LABEL,
        message=message,
        color=color,
        label_width=label_width,
        message_width=message_width,
        width=label_width + message_width,
    )


@rendered_once()
async def badge(request: Request) -> Response:
    p = request.path_params
    repository = await public_repository(p["host"], p["owner"], p["name"])
    async with db.read_session() as session:
        row = (await session.execute(_COUNTS, {"repository_id": repository.id})).first()
    if row is None:  # delisted between the two reads
        raise NotFound({"repository": ["not found"]}, message=NOT_PUBLIC)
    open_count, scanned = int(row[0]), bool(row[1])
    if open_count:
        message, color = f"{open_count} open", COLORS["open"]
    elif scanned:
        message, color = "clean", COLORS["clean"]
    else:
        message, color = "not scanned", COLORS["not scanned"]
    tags = [repository_tag(repository.id)]
    return document_response(request, badge_svg(message, color).encode(), SVG_TYPE, tags=tags)


routes: list[BaseRoute] = [
    Route("/repos/{host}/{owner}/{name}/badge.svg", badge, methods=["GET", "HEAD"], name="badge"),
]
