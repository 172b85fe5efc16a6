"""The moderation console's frame (docs/domain.md §8): who may use it (a moderator or admin in good standing), one
list page (the keyset page with its filters, and the message after a no-JS action) and one action's form and route
(`action_route`: run as one audited action, answered for both the no-JS and the htmx form). Its pages and actions are
app/moderation/routes.py."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypedDict, TypeVar
from urllib.parse import quote

from msgspec import Struct, structs
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute

from app.accounts.models import ACCOUNT_STATES, PLATFORM_ROLES, Account
from app.accounts.sessions import current_account
from app.kernel import purge, web
from app.kernel.actors import can_moderate
from app.kernel.errors import DomainError, Forbidden, NotFound, Unauthorized
from app.kernel.forms import MODERATION_FORM, field, safe_local_path, with_query
from app.kernel.intake import body_route, form_parser
from app.kernel.paging import Page
from app.kernel.text import ascii_int, require_clean
from app.maintainers.models import STATEMENT_VISIBILITIES
from app.maintainers.statement_queries import ModeratedStatement
from app.maintainers.webhooks import ModeratedWebhook
from app.moderation import queries, service, signal
from app.moderation.rows import ConsoleAuditEvent
from app.registry.models import LISTING_STATUSES
from app.reports.models import VISIBILITIES

T = TypeVar("T")
E = TypeVar("E")

CHOICES = {
    "visibilities": VISIBILITIES,
    "listing_statuses": LISTING_STATUSES,
    "platform_roles": PLATFORM_ROLES,
    "account_states": ACCOUNT_STATES,
    "statement_visibilities": STATEMENT_VISIBILITIES,
    "pin_choices": signal.PIN_CHOICES,
}


def render(request: Request, name: str, context: dict[str, Any], status_code: int = 200) -> Response:
    # no Cache-Control here: the security middleware marks every console response no-store
    return web.page(request, name, {**CHOICES, **context}, status_code=status_code, cache=None)


async def subject_or_404(read: Callable[[int], Awaitable[T | None]], subject_id: int, field: str, noun: str) -> T:
    """What a console path names by id (none past the bigint range), or the 404 naming it."""
    found = await read(subject_id) if 0 < subject_id < 2**63 else None
    if found is None:
        raise NotFound({field: ["not found"]}, message=f"No {noun} with id {subject_id}.")
    return found


async def moderator(request: Request) -> Account:
    """The acting moderator; anyone else is refused (401 without a session, 403 without the standing)."""
    account = await current_account(request)
    if account is None:
        raise Unauthorized(
            {"session": ["log in to moderate"]},
            title="Log in to moderate",
            message="Your session has ended or you are not logged in.",
        )
    if not can_moderate(account):
        raise Forbidden(
            {"account": ["is not a moderator in good standing"]},
            title="Moderators only",
            message="The moderation console is for moderators and admins in good standing.",
        )
    return account


async def _flash(request: Request) -> str | None:
    """The message for `?recorded=<audit event id>` after a no-JS action."""
    recorded = ascii_int(request.query_params.get("recorded"))
    if recorded is None:
        return None
    event = await queries.get_audit_event(recorded)
    if event is None:
        return None
    message = _recorded_message(event, await service.pending_rollup_backlog())
    cache = request.query_params.get("cache")  # the shared cache's purge, as the action's redirect said
    return f"{message} {purge.STATE_NOTICES[cache].format(where='')}" if cache in purge.STATE_NOTICES else message


def _recorded_message(event: ConsoleAuditEvent, backlog: service.RollupBacklog) -> str:
    before = event.before or {}
    changes = ", ".join(f"{k} {before.get(k)} → {v}" for k, v in (event.after or {}).items())
    return (
        f"Recorded as audit event #{event.id}: {event.subject_type} {event.subject_id}: {changes}. "
        f"Atlas: {service.describe_backlog(backlog)}."
    )


def _cursor(request: Request) -> str | None:
    return request.query_params.get("cursor") or None


async def list_page(
    request: Request,
    section: str,
    filters: dict[str, str],
    load: Callable[[str | None], Awaitable[Page[E]]],
) -> Response:
    """One console list: the moderator check (an anonymous visitor goes to the login page and comes back), the
    keyset page; bad filters and cursors are a "Bad filter" error page."""
    try:
        account = await moderator(request)
    except Unauthorized:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)
    try:
        page_ = await load(_cursor(request))
    except DomainError as exc:
        exc.title = "Bad filter"
        raise
    context = {"account": account, "section": section, "page": page_, "filters": filters}
    return render(request, f"moderation/{section}.html", {**context, **await _list_context(request, page_)})


class _ListExtras(TypedDict):
    flash: str | None  # the message after a no-JS action
    return_to: str  # this page, where the forms on it come back to
    next_href: str | None


async def _list_context(request: Request, page: Page[E]) -> _ListExtras:
    here = _here(request)
    cursor = page["next_cursor"]
    return {
        "flash": await _flash(request),
        "return_to": here,
        "next_href": with_query(here, cursor=cursor) if cursor else None,
    }


def _here(request: Request) -> str:
    query = "&".join(f"{quote(k)}={quote(v)}" for k, v in request.query_params.multi_items() if k != "recorded")
    return request.url.path + (f"?{query}" if query else "")


REASON_FIELDS = ("reason", "notes", "return_to")


async def act(
    request: Request,
    form: FormData,
    *,
    partial: str,
    subject: Subject,
    fields: tuple[str, ...],
    action: Callable[[dict[str, str]], Awaitable[service.ActionOutcome]],
    default_return: str,
) -> Response:
    """Run one moderation action from its form (`fields` plus reason, notes and return_to) and answer for both
    the no-JS and the htmx form."""
    values = {k: field(form, k) for k in (*fields, *REASON_FIELDS)}
    htmx = request.headers.get("hx-request") == "true"
    return_to = safe_local_path(values.get("return_to"), default=default_return, prefix="/moderation")
    context: dict[str, Any] = {"subject": subject, "values": values, "errors": {}, "return_to": return_to}
    try:
        require_clean(values)  # no NUL or control characters in notes and reasons (docs/security.md)
        with purge.collect() as purges:  # the shared cache is purged after the commit, before this answer
            outcome = await action(values)
    except DomainError as exc:
        context["errors"] = exc.errors
        status = exc.status_code
        if htmx:
            return render(request, partial, context, status_code=status)
        return render(request, "moderation/form_page.html", {**context, "partial": partial}, status_code=status)
    cache = purge.worst_state(purges)
    if not htmx:
        extra = {"cache": cache} if cache is not None else {}
        return RedirectResponse(with_query(return_to, recorded=str(outcome.audit_event_id), **extra), status_code=303)
    event = await queries.get_audit_event(outcome.audit_event_id)
    assert event is not None
    fresh = {k: v for k, v in values.items() if k not in ("reason", "notes")}
    fresh.update(outcome.after)
    context.update(
        subject={**_fields(subject), **outcome.after},  # the form shows the subject as the action left it
        values=fresh,
        flash=" ".join(
            m for m in (_recorded_message(event, await service.pending_rollup_backlog()), purge.notice(purges)) if m
        ),
    )
    return render(request, partial, context)


# What an action's form is about: a console row (app.moderation.rows), or a feature's own view of it.
Subject = Struct | ModeratedStatement | ModeratedWebhook


def _fields(subject: Subject) -> dict[str, Any]:
    return structs.asdict(subject) if isinstance(subject, Struct) else dict(vars(subject))


@dataclass(frozen=True)
class Action:
    """What an action's path names: the subject its form shows, the audited action run with the form's values, and
    where the no-JS form goes back to unless it says."""

    subject: Subject
    run: Callable[[dict[str, str]], Awaitable[service.ActionOutcome]]
    default_return: str


def action_route(
    path: str, find: Callable[[Request, Account], Awaitable[Action]], partial: str, fields: tuple[str, ...] = ()
) -> BaseRoute:
    """One action's form route: the moderator check and the form's parse (`body_route`), `find` (a 404 when the
    subject is gone), then `act` with the form `moderation/<partial>` and its `fields`."""

    async def handle(request: Request, actor: Account, form: FormData) -> Response:
        found = await find(request, actor)
        return await act(
            request,
            form,
            partial=f"moderation/{partial}",
            subject=found.subject,
            fields=fields,
            action=found.run,
            default_return=found.default_return,
        )

    return body_route(path, handle, authenticate=moderator, parse=form_parser(MODERATION_FORM))
