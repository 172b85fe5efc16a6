"""Earned trust's routes: an account's own signal (`GET /api/v1/account/signal`, any scope) and the public precision
page with its twin (docs/domain.md "Earned trust")."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from app.accounts.models import Account
from app.accounts.service import bearer_caller, require_scope
from app.accounts.sessions import current_account
from app.kernel import db
from app.kernel.actors import can_verify, has_moderator_role
from app.kernel.answers import answer_response, iso
from app.kernel.errors import Forbidden
from app.kernel.shared_cache import ATLAS_TAG
from app.kernel.web import PRIVATE_CACHE, json_twin, page, wants_json
from app.record.rendered import rendered_once
from app.reports.policy import VERIFY_SCOPES
from app.trust.precision import precision_rows
from app.trust.queue import Held, held_page
from app.trust.signal import signal_of
from app.trust.types import (
    HeldFinding,
    ModelRow,
    PrecisionAnswer,
    ProvenanceRow,
    ReviewQueue,
    SignalAnswer,
    SignalCounts,
    ToolRuleRow,
)

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


def _held(item: Held, *, moderator: bool) -> HeldFinding:
    held = HeldFinding(
        public_id=item.public_id, canonical_public_id=item.canonical_public_id, repository=item.repository,
        title=item.title, severity=item.severity, file=item.file_path, line_start=item.line_start,
        line_end=item.line_end, commit_sha=item.commit_sha, reported_at=iso(item.reported_at) or "",
    )  # fmt: skip
    if moderator:  # a reporter's signal is theirs and the moderators' (docs/domain.md "Earned trust")
        held.reporter, held.reporter_precision = item.reporter, round(item.precision, 4)
    return held


def _require_reviewer(account: Account) -> None:
    if not can_verify(account):
        raise Forbidden({"account": ["must be a qualified reviewer or a moderator to see the review queue"]})


async def review_queue(request: Request) -> Response:
    """`GET /api/v1/review-queue`: held findings, oldest first (scope findings:verify or reviews:verify)."""
    caller = await bearer_caller(request.headers.get("authorization"))
    require_scope(caller.scopes, *VERIFY_SCOPES)
    _require_reviewer(caller.account)
    async with db.read_session(replica=False) as session:
        items, cursor = await held_page(session, request.query_params.get("cursor"))
    moderator = has_moderator_role(caller.account)
    answer = ReviewQueue(items=[_held(i, moderator=moderator) for i in items], next_cursor=cursor)
    return answer_response(answer, headers={"Cache-Control": PRIVATE_CACHE})


async def review_queue_page(request: Request) -> Response:
    account = await current_account(request)
    if account is None:
        return RedirectResponse("/login?next=%2Freview-queue", status_code=303)
    _require_reviewer(account)
    async with db.read_session(replica=False) as session:
        items, cursor = await held_page(session, request.query_params.get("cursor"))
    context = {"items": items, "next_cursor": cursor, "moderator": has_moderator_role(account), "account": account}
    return page(request, "trust/review_queue.html", context, cache=PRIVATE_CACHE)


routes: list[BaseRoute] = [
    Route("/api/v1/review-queue", review_queue, methods=["GET", "HEAD"], name="review_queue_api"),
    Route("/review-queue", review_queue_page, methods=["GET", "HEAD"], name="review_queue"),
    Route("/api/v1/account/signal", account_signal, methods=["GET", "HEAD"], name="account_signal"),
    Route("/stats/precision{format:format}", precision_page, methods=["GET", "HEAD"], name="precision"),
]
