"""Earned trust's routes: an account's own signal (`GET /api/v1/account/signal`, any scope) and the public precision
page with its twin (docs/domain.md "Earned trust")."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from app.accounts.service import bearer_caller
from app.kernel import db
from app.kernel.answers import answer_response
from app.kernel.shared_cache import ATLAS_TAG
from app.kernel.web import PRIVATE_CACHE, json_twin, page, wants_json
from app.record.rendered import rendered_once
from app.trust.precision import precision_rows
from app.trust.signal import signal_of
from app.trust.types import ModelRow, PrecisionAnswer, ProvenanceRow, SignalAnswer, SignalCounts, ToolRuleRow

PRECISION_TAGS = [ATLAS_TAG]  # recounted as reviews land: purged with the atlas, else kept the shared cache's minutes


async def account_signal(request: Request) -> Response:
    caller = await bearer_caller(request.headers.get("authorization"))
    async with db.read_session(replica=False) as session:
        signal = await signal_of(session, caller.account.id)
    counts = signal.counts
    answer = SignalAnswer(
        signal=SignalCounts(
            precision=round(counts.precision, 4),
            decided=counts.decided,
            verified=counts.verified,
            disputed=counts.disputed,
            withdrawn=counts.withdrawn,
            refused=counts.refused,
            gated=signal.gated,
            reasons=signal.reasons,
        )
    )
    return answer_response(answer, headers={"Cache-Control": PRIVATE_CACHE})


def _path(request: Request) -> str:
    path: str = request.scope["path"]
    return path


@rendered_once(_path)
async def precision_page(request: Request) -> Response:
    async with db.read_session() as session:
        rows = await precision_rows(session)
    if wants_json(request):
        answer = PrecisionAnswer(
            by_provenance=[ProvenanceRow(**row.as_json()) for row in rows["by_provenance"]],
            by_model=[ModelRow(**row.as_json()) for row in rows["by_model"]],
            by_tool_rule=[ToolRuleRow(**row.as_json()) for row in rows["by_tool_rule"]],
        )
        return json_twin(answer, tags=PRECISION_TAGS)
    return page(request, "trust/precision.html", {"rows": rows}, json_url="/stats/precision.json", tags=PRECISION_TAGS)


routes: list[BaseRoute] = [
    Route("/api/v1/account/signal", account_signal, methods=["GET", "HEAD"], name="account_signal"),
    Route("/stats/precision{format:format}", precision_page, methods=["GET", "HEAD"], name="precision"),
]
