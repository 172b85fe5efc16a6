"""The moderation console (`/moderation`): lists and plain HTML forms, enhanced by htmx when loaded (docs/domain.md §8)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import quote

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from app.accounts.models import ACCOUNT_STATES, PLATFORM_ROLES, Account
from app.accounts.sessions import current_account
from app.kernel import purge
from app.kernel.actors import can_moderate
from app.kernel.errors import DomainError, Forbidden, NotFound, Unauthorized
from app.kernel.forms import MODERATION_FORM, field, safe_local_path, with_query
from app.kernel.intake import body_route, form_parser
from app.kernel.paging import Page
from app.kernel.text import ascii_int, require_clean
from app.kernel.urls import finding_path, repo_path
from app.kernel.web import page
from app.maintainers import webhooks
from app.maintainers.models import STATEMENT_VISIBILITIES
from app.maintainers.statement_queries import moderation_subject
from app.moderation import account_actions, disclosures, queries, service, signal
from app.registry.models import LISTING_STATUSES
from app.reports.models import VISIBILITIES

T = TypeVar("T")

CHOICES = {
    "visibilities": VISIBILITIES,
    "listing_statuses": LISTING_STATUSES,
    "platform_roles": PLATFORM_ROLES,
    "account_states": ACCOUNT_STATES,
    "statement_visibilities": STATEMENT_VISIBILITIES,
    "pin_choices": signal.PIN_CHOICES,
}


def _page(request: Request, name: str, context: dict[str, Any], status_code: int = 200) -> Response:
    # no Cache-Control here: the security middleware marks every console response no-store
    return page(request, name, {**CHOICES, **context}, status_code=status_code, cache=None)


async def _subject(read: Callable[[int], Awaitable[T | None]], subject_id: int, field: str, noun: str) -> T:
    """What a console path names by id (none past the bigint range), or the 404 naming it."""
    found = await read(subject_id) if 0 < subject_id < 2**63 else None
    if found is None:
        raise NotFound({field: ["not found"]}, message=f"No {noun} with id {subject_id}.")
    return found


async def _moderator(request: Request) -> Account:
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


def _recorded_message(event: dict[str, Any], backlog: dict[str, Any]) -> str:
    changes = ", ".join(f"{k} {event['before'].get(k)} → {v}" for k, v in (event["after"] or {}).items())
    return (
        f"Recorded as audit event #{event['id']}: {event['subject_type']} {event['subject_id']}: {changes}. "
        f"Atlas: {service.describe_backlog(backlog)}."
    )


def _cursor(request: Request) -> str | None:
    return request.query_params.get("cursor") or None


async def _list_page(
    request: Request,
    section: str,
    filters: dict[str, str],
    load: Callable[[str | None], Awaitable[Page[dict[str, Any]]]],
) -> Response:
    """One console list: the moderator check (an anonymous visitor goes to the login page and comes back), the
    keyset page; bad filters and cursors are a "Bad filter" error page."""
    try:
        account = await _moderator(request)
    except Unauthorized:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)
    try:
        page_ = await load(_cursor(request))
    except DomainError as exc:
        exc.title = "Bad filter"
        raise
    context = {"account": account, "section": section, "page": page_, "filters": filters}
    return _page(request, f"moderation/{section}.html", {**context, **await _list_context(request, page_)})


async def reports_page(request: Request) -> Response:
    repository = request.query_params.get("repository", "").strip()
    visibility = request.query_params.get("visibility", "")
    return await _list_page(
        request,
        "reports",
        {"repository": repository, "visibility": visibility},
        lambda cursor: queries.list_recent_reports(
            repository=repository or None, visibility=visibility or None, cursor=cursor
        ),
    )


async def repositories_page(request: Request) -> Response:
    listing_status = request.query_params.get("listing_status", "")
    return await _list_page(
        request,
        "repositories",
        {"listing_status": listing_status},
        lambda cursor: queries.list_repositories(listing_status=listing_status or None, cursor=cursor),
    )


async def accounts_page(request: Request) -> Response:
    role = request.query_params.get("platform_role", "")
    state = request.query_params.get("state", "")

    async def load(cursor: str | None) -> Page[dict[str, Any]]:
        return await signal.with_signals(
            await queries.list_accounts(platform_role=role or None, state=state or None, cursor=cursor)
        )

    return await _list_page(request, "accounts", {"platform_role": role, "state": state}, load)


async def held_page(request: Request) -> Response:
    """The findings held for review, oldest first, with their reporters' signal (docs/domain.md "Earned trust")."""
    return await _list_page(request, "held", {}, signal.held_queue)


async def disclosures_page(request: Request) -> Response:
    """Open coordinated-disclosure embargoes, soonest deadline first, each with its publish and extend forms."""
    repository = request.query_params.get("repository", "").strip()
    return await _list_page(
        request,
        "disclosures",
        {"repository": repository},
        lambda cursor: disclosures.open_embargoes(repository=repository or None, cursor=cursor),
    )


async def audit_page(request: Request) -> Response:
    return await _list_page(request, "audit", {}, lambda cursor: queries.list_audit_events(cursor=cursor))


async def audit_event_page(request: Request) -> Response:
    """One audit event (`/moderation/audit/{id}`): what the markers on the public pages link to."""
    try:
        account = await _moderator(request)
    except Unauthorized:
        return RedirectResponse(f"/login?next={quote(request.url.path, safe='')}", status_code=303)
    event_id = request.path_params["event_id"]
    event = await _subject(queries.get_audit_event, event_id, "audit_event", "audit event")
    context = {"account": account, "section": "audit", "event": event, "subject_href": await _subject_href(event)}
    return _page(request, "moderation/audit_event.html", context)


async def _subject_href(event: dict[str, Any]) -> str | None:
    """Where the event's subject is seen now (None once it is gone or has no page)."""
    kind, raw = event["subject_type"], event["subject_id"]
    if kind == "scan" and (scan_id := ascii_int(raw)):
        report = await queries.get_report(scan_id)
        return repo_path(report["host"], report["owner"], report["name"]) + f"#report-{scan_id}" if report else None
    if kind == "repository" and raw.count("/") == 2:
        repo = await queries.get_repository(*raw.split("/"))
        return repo_path(repo["host"], repo["owner"], repo["name"]) if repo else None
    if kind == "disclosure" and (canonical_id := ascii_int(raw)):
        occurrence = await disclosures.occurrence_of(canonical_id)
        return finding_path(occurrence) if occurrence else None
    if kind == "statement" and (statement_id := ascii_int(raw)):
        statement = await moderation_subject(statement_id)
        occurrence = statement["occurrence"] if statement else None
        return finding_path(occurrence) + "#maintainer-statement" if occurrence else None
    return None


async def _list_context(request: Request, page: Page[dict[str, Any]]) -> dict[str, Any]:
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


async def _act(
    request: Request,
    form: FormData,
    *,
    partial: str,
    subject: dict[str, Any],
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
            return _page(request, partial, context, status_code=status)
        return _page(request, "moderation/form_page.html", {**context, "partial": partial}, status_code=status)
    cache = purge.worst_state(purges)
    if not htmx:
        extra = {"cache": cache} if cache is not None else {}
        return RedirectResponse(with_query(return_to, recorded=str(outcome.audit_event_id), **extra), status_code=303)
    event = await queries.get_audit_event(outcome.audit_event_id)
    assert event is not None
    fresh = {k: v for k, v in values.items() if k not in ("reason", "notes")}
    for key, value in outcome.after.items():
        subject = {**subject, key: value}
        fresh[key] = value
    context.update(
        subject=subject,
        values=fresh,
        flash=" ".join(
            m for m in (_recorded_message(event, await service.pending_rollup_backlog()), purge.notice(purges)) if m
        ),
    )
    return _page(request, partial, context)


async def scan_visibility(request: Request, actor: Account, form: FormData) -> Response:
    raw_id = request.path_params["scan_id"]
    report = await _subject(queries.get_report, raw_id, "report", "report")
    return await _act(
        request,
        form,
        partial="moderation/_scan_form.html",
        subject=report,
        fields=("visibility",),
        action=lambda v: service.change_scan_visibility(actor, raw_id, v["visibility"], v["reason"], v["notes"]),
        default_return="/moderation",
    )


async def repository_listing(request: Request, actor: Account, form: FormData) -> Response:
    host, owner, name = (request.path_params[k] for k in ("host", "owner", "name"))
    repo = await queries.get_repository(host, owner, name)
    if repo is None:
        raise NotFound({"repository": ["not found"]}, message=f"No repository {host}/{owner}/{name}.")
    slug = (repo["host"], repo["owner"], repo["name"])
    return await _act(
        request,
        form,
        partial="moderation/_repository_form.html",
        subject=repo,
        fields=("listing_status",),
        action=lambda v: service.change_repository_listing(actor, *slug, v["listing_status"], v["reason"], v["notes"]),
        default_return="/moderation/repositories",
    )


async def _target_account(request: Request) -> dict[str, Any]:
    """The account a moderator's form names (`{handle}` in the path), or 404."""
    handle = request.path_params["handle"]
    target = await queries.get_account(handle)
    if target is None:
        raise NotFound({"account": ["not found"]}, message=f"No account @{handle}.")
    return target


async def account_change(request: Request, actor: Account, form: FormData) -> Response:
    target = await _target_account(request)
    return await _act(
        request,
        form,
        partial="moderation/_account_form.html",
        subject=target,
        fields=("platform_role", "state"),
        action=lambda v: account_actions.change_account(
            actor,
            target["handle"],
            platform_role=v["platform_role"] or None,
            state=v["state"] or None,
            reason=v["reason"],
            notes=v["notes"],
        ),
        default_return="/moderation/accounts",
    )


async def account_statements_hide(request: Request, actor: Account, form: FormData) -> Response:
    target = await _target_account(request)
    return await _act(
        request,
        form,
        partial="moderation/_statements_hide_form.html",
        subject=target,
        fields=(),
        action=lambda v: account_actions.hide_account_statements(actor, target["handle"], v["reason"], v["notes"]),
        default_return="/moderation/accounts",
    )


async def account_signal_pin(request: Request, actor: Account, form: FormData) -> Response:
    target = await _target_account(request)
    [subject] = (await signal.with_signals({"entries": [target], "next_cursor": None}))["entries"]
    return await _act(
        request,
        form,
        partial="moderation/_signal_form.html",
        subject=subject,
        fields=("pin",),
        action=lambda v: signal.pin_signal(actor, target["handle"], v["pin"], v["reason"], v["notes"]),
        default_return="/moderation/accounts",
    )


async def account_held_release(request: Request, actor: Account, form: FormData) -> Response:
    target = await _target_account(request)
    [subject] = (await signal.with_signals({"entries": [target], "next_cursor": None}))["entries"]
    return await _act(
        request,
        form,
        partial="moderation/_release_form.html",
        subject=subject,
        fields=(),
        action=lambda v: signal.release_queue(actor, target["handle"], v["reason"], v["notes"]),
        default_return="/moderation/held",
    )


async def maintainer_end(request: Request, actor: Account, form: FormData) -> Response:
    host, owner, name, handle = (request.path_params[k] for k in ("host", "owner", "name", "handle"))
    repo = await queries.get_repository(host, owner, name)
    if repo is None:
        raise NotFound({"repository": ["not found"]}, message=f"No repository {host}/{owner}/{name}.")
    slug = (repo["host"], repo["owner"], repo["name"])
    subject = {**repo, "handle": handle}
    return await _act(
        request,
        form,
        partial="moderation/_maintainer_form.html",
        subject=subject,
        fields=(),
        action=lambda v: service.end_maintainership(actor, *slug, handle, v["reason"], v["notes"]),
        default_return=repo_path(*slug) + "/maintain",
    )


async def statement_visibility(request: Request, actor: Account, form: FormData) -> Response:
    statement_id = request.path_params["statement_id"]
    statement = await _subject(moderation_subject, statement_id, "statement", "statement")
    occurrence = statement["occurrence"]
    return await _act(
        request,
        form,
        partial="moderation/_statement_form.html",
        subject=statement,
        fields=("visibility",),
        action=lambda v: service.change_statement_visibility(
            actor, statement_id, v["visibility"], v["reason"], v["notes"]
        ),
        default_return=finding_path(occurrence) if occurrence else "/moderation",
    )


async def _clock_subject(request: Request) -> tuple[str, dict[str, Any]]:
    public_id = request.path_params["canonical_public_id"]
    found = await disclosures.subject(public_id)
    if found is None:
        raise NotFound({"finding": ["not found"]}, message=f"No disclosure clock for finding {public_id}.")
    return public_id, found


async def disclosure_extend(request: Request, actor: Account, form: FormData) -> Response:
    public_id, subject = await _clock_subject(request)
    return await _act(
        request,
        form,
        partial="moderation/_disclosure_extend_form.html",
        subject=subject,
        fields=("days",),
        action=lambda v: disclosures.extend(actor, public_id, v["days"], v["reason"], v["notes"]),
        default_return="/moderation/disclosures",
    )


async def disclosure_publish(request: Request, actor: Account, form: FormData) -> Response:
    public_id, subject = await _clock_subject(request)
    return await _act(
        request,
        form,
        partial="moderation/_disclosure_publish_form.html",
        subject=subject,
        fields=(),
        action=lambda v: disclosures.publish(actor, public_id, v["reason"], v["notes"]),
        default_return="/moderation/disclosures",
    )


async def webhook_delete(request: Request, actor: Account, form: FormData) -> Response:
    webhook_id = request.path_params["webhook_id"]
    hook = await _subject(webhooks.moderation_subject, webhook_id, "webhook", "webhook")
    return await _act(
        request,
        form,
        partial="moderation/_webhook_form.html",
        subject={"id": hook.id, "repository": hook.repository, "owner": hook.owner, "destination": hook.destination},
        fields=(),
        action=lambda v: service.delete_webhook(actor, webhook_id, v["reason"], v["notes"]),
        default_return=repo_path(*hook.repository.split("/")) + "/maintain",
    )


_FORM: dict[str, Any] = {"authenticate": _moderator, "parse": form_parser(MODERATION_FORM)}

routes: list[BaseRoute] = [
    Route("/moderation", reports_page, methods=["GET"], name="moderation"),
    Route("/moderation/repositories", repositories_page, methods=["GET"], name="moderation_repositories"),
    Route("/moderation/accounts", accounts_page, methods=["GET"], name="moderation_accounts"),
    Route("/moderation/held", held_page, methods=["GET"], name="moderation_held"),
    Route("/moderation/disclosures", disclosures_page, methods=["GET"], name="moderation_disclosures"),
    Route("/moderation/audit", audit_page, methods=["GET"], name="moderation_audit"),
    Route("/moderation/audit/{event_id:int}", audit_event_page, methods=["GET"], name="moderation_audit_event"),
    body_route("/moderation/scans/{scan_id:int}/visibility", scan_visibility, **_FORM),
    body_route("/moderation/repos/{host}/{owner}/{name}/listing", repository_listing, **_FORM),
    body_route("/moderation/accounts/{handle}", account_change, **_FORM),
    body_route("/moderation/accounts/{handle}/statements", account_statements_hide, **_FORM),
    body_route("/moderation/accounts/{handle}/signal", account_signal_pin, **_FORM),
    body_route("/moderation/accounts/{handle}/release", account_held_release, **_FORM),
    body_route("/moderation/repos/{host}/{owner}/{name}/maintainers/{handle}", maintainer_end, **_FORM),
    body_route("/moderation/statements/{statement_id:int}", statement_visibility, **_FORM),
    body_route("/moderation/webhooks/{webhook_id:int}", webhook_delete, **_FORM),
    body_route("/moderation/disclosures/{canonical_public_id}/extend", disclosure_extend, **_FORM),
    body_route("/moderation/disclosures/{canonical_public_id}/publish", disclosure_publish, **_FORM),
]
