"""The moderation console (`/moderation`): lists and plain HTML forms, enhanced by htmx when loaded (docs/domain.md §8),
each page and action on the console's frame (app/moderation/console.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import quote

from msgspec import structs
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from app.accounts.models import Account
from app.kernel.errors import NotFound, Unauthorized
from app.kernel.paging import Page
from app.kernel.text import ascii_int
from app.kernel.urls import finding_path, repo_path
from app.maintainers import webhooks
from app.maintainers.statement_queries import moderation_subject
from app.moderation import account_actions, console, disclosures, queries, service, signal
from app.moderation.console import action_route
from app.moderation.rows import (
    ClockSubject,
    ConsoleAccount,
    ConsoleAuditEvent,
    ConsoleRepository,
    Maintainership,
    SignalledAccount,
)


async def reports_page(request: Request) -> Response:
    repository = request.query_params.get("repository", "").strip()
    visibility = request.query_params.get("visibility", "")
    return await console.list_page(
        request,
        "reports",
        {"repository": repository, "visibility": visibility},
        lambda cursor: queries.list_recent_reports(
            repository=repository or None, visibility=visibility or None, cursor=cursor
        ),
    )


async def repositories_page(request: Request) -> Response:
    listing_status = request.query_params.get("listing_status", "")
    return await console.list_page(
        request,
        "repositories",
        {"listing_status": listing_status},
        lambda cursor: queries.list_repositories(listing_status=listing_status or None, cursor=cursor),
    )


async def accounts_page(request: Request) -> Response:
    role = request.query_params.get("platform_role", "")
    state = request.query_params.get("state", "")

    async def load(cursor: str | None) -> Page[SignalledAccount]:
        return await signal.with_signals(
            await queries.list_accounts(platform_role=role or None, state=state or None, cursor=cursor)
        )

    return await console.list_page(request, "accounts", {"platform_role": role, "state": state}, load)


async def held_page(request: Request) -> Response:
    """The findings held for review, oldest first, with their reporters' signal (docs/domain.md "Earned trust")."""
    return await console.list_page(request, "held", {}, signal.held_queue)


async def disclosures_page(request: Request) -> Response:
    """Open coordinated-disclosure embargoes, soonest deadline first, each with its publish and extend forms."""
    repository = request.query_params.get("repository", "").strip()
    return await console.list_page(
        request,
        "disclosures",
        {"repository": repository},
        lambda cursor: disclosures.open_embargoes(repository=repository or None, cursor=cursor),
    )


async def audit_page(request: Request) -> Response:
    return await console.list_page(request, "audit", {}, lambda cursor: queries.list_audit_events(cursor=cursor))


async def audit_event_page(request: Request) -> Response:
    """One audit event (`/moderation/audit/{id}`): what the markers on the public pages link to."""
    try:
        account = await console.moderator(request)
    except Unauthorized:
        return RedirectResponse(f"/login?next={quote(request.url.path, safe='')}", status_code=303)
    event_id = request.path_params["event_id"]
    event = await console.subject_or_404(queries.get_audit_event, event_id, "audit_event", "audit event")
    context = {"account": account, "section": "audit", "event": event, "subject_href": await _subject_href(event)}
    return console.render(request, "moderation/audit_event.html", context)


async def _subject_href(event: ConsoleAuditEvent) -> str | None:
    """Where the event's subject is seen now (None once it is gone or has no page)."""
    kind, raw = event.subject_type, event.subject_id
    if kind == "scan" and (scan_id := ascii_int(raw)):
        report = await queries.get_report(scan_id)
        return repo_path(report.host, report.owner, report.name) + f"#report-{scan_id}" if report else None
    if kind == "repository" and raw.count("/") == 2:
        repo = await queries.get_repository(*raw.split("/"))
        return repo_path(repo.host, repo.owner, repo.name) if repo else None
    if kind == "disclosure" and (canonical_id := ascii_int(raw)):
        occurrence = await disclosures.occurrence_of(canonical_id)
        return finding_path(occurrence) if occurrence else None
    if kind == "statement" and (statement_id := ascii_int(raw)):
        statement = await moderation_subject(statement_id)
        occurrence = statement.occurrence if statement else None
        return finding_path(occurrence) + "#maintainer-statement" if occurrence else None
    return None


async def scan_visibility(request: Request, actor: Account) -> console.Action:
    raw_id = request.path_params["scan_id"]
    report = await console.subject_or_404(queries.get_report, raw_id, "report", "report")
    return console.Action(
        subject=report,
        run=lambda v: service.change_scan_visibility(actor, raw_id, v["visibility"], v["reason"], v["notes"]),
        default_return="/moderation",
    )


async def _repository(host: str, owner: str, name: str) -> ConsoleRepository:
    """The repository a moderator's form names (`{host}/{owner}/{name}` in the path), or 404."""
    repo = await queries.get_repository(host, owner, name)
    if repo is None:
        raise NotFound({"repository": ["not found"]}, message=f"No repository {host}/{owner}/{name}.")
    return repo


async def repository_listing(request: Request, actor: Account) -> console.Action:
    repo = await _repository(*(request.path_params[k] for k in ("host", "owner", "name")))
    slug = (repo.host, repo.owner, repo.name)
    return console.Action(
        subject=repo,
        run=lambda v: service.change_repository_listing(actor, *slug, v["listing_status"], v["reason"], v["notes"]),
        default_return="/moderation/repositories",
    )


async def _target_account(request: Request) -> ConsoleAccount:
    """The account a moderator's form names (`{handle}` in the path), or 404."""
    handle = request.path_params["handle"]
    target = await queries.get_account(handle)
    if target is None:
        raise NotFound({"account": ["not found"]}, message=f"No account @{handle}.")
    return target


async def _target_with_signal(request: Request) -> SignalledAccount:
    """The named account with its reporter signal, for the signal and queue forms."""
    page = await signal.with_signals({"entries": [await _target_account(request)], "next_cursor": None})
    return page["entries"][0]


# what an action on an account runs: the actor, the account's handle and the form's values
AccountRun = Callable[[Account, str, dict[str, str]], Awaitable[service.ActionOutcome]]


def _account_action(
    run: AccountRun,
    *,
    target: Callable[[Request], Awaitable[ConsoleAccount]] = _target_account,
    default_return: str = "/moderation/accounts",
) -> Callable[[Request, Account], Awaitable[console.Action]]:
    """An action on the account the path names, its form showing `target`'s row of it."""

    async def find(request: Request, actor: Account) -> console.Action:
        subject = await target(request)
        return console.Action(
            subject=subject, run=lambda v: run(actor, subject.handle, v), default_return=default_return
        )

    return find


account_change = _account_action(
    lambda actor, handle, v: account_actions.change_account(
        actor,
        handle,
        platform_role=v["platform_role"] or None,
        state=v["state"] or None,
        reason=v["reason"],
        notes=v["notes"],
    )
)
account_statements_hide = _account_action(
    lambda actor, handle, v: account_actions.hide_account_statements(actor, handle, v["reason"], v["notes"])
)
# the signal's forms show the account with its reporter signal
account_signal_pin = _account_action(
    lambda actor, handle, v: signal.pin_signal(actor, handle, v["pin"], v["reason"], v["notes"]),
    target=_target_with_signal,
)
account_held_release = _account_action(
    lambda actor, handle, v: signal.release_queue(actor, handle, v["reason"], v["notes"]),
    target=_target_with_signal,
    default_return="/moderation/held",
)


async def maintainer_end(request: Request, actor: Account) -> console.Action:
    repo = await _repository(*(request.path_params[k] for k in ("host", "owner", "name")))
    handle = request.path_params["handle"]
    slug = (repo.host, repo.owner, repo.name)
    return console.Action(
        subject=Maintainership(**structs.asdict(repo), handle=handle),
        run=lambda v: service.end_maintainership(actor, *slug, handle, v["reason"], v["notes"]),
        default_return=repo_path(*slug) + "/maintain",
    )


async def statement_visibility(request: Request, actor: Account) -> console.Action:
    statement_id = request.path_params["statement_id"]
    statement = await console.subject_or_404(moderation_subject, statement_id, "statement", "statement")
    occurrence = statement.occurrence
    return console.Action(
        subject=statement,
        run=lambda v: service.change_statement_visibility(
            actor, statement_id, v["visibility"], v["reason"], v["notes"]
        ),
        default_return=finding_path(occurrence) if occurrence else "/moderation",
    )


async def _clock_subject(request: Request) -> tuple[str, ClockSubject]:
    public_id = request.path_params["canonical_public_id"]
    found = await disclosures.subject(public_id)
    if found is None:
        raise NotFound({"finding": ["not found"]}, message=f"No disclosure clock for finding {public_id}.")
    return public_id, found


async def disclosure_extend(request: Request, actor: Account) -> console.Action:
    public_id, subject = await _clock_subject(request)
    return console.Action(
        subject=subject,
        run=lambda v: disclosures.extend(actor, public_id, v["days"], v["reason"], v["notes"]),
        default_return="/moderation/disclosures",
    )


async def disclosure_publish(request: Request, actor: Account) -> console.Action:
    public_id, subject = await _clock_subject(request)
    return console.Action(
        subject=subject,
        run=lambda v: disclosures.publish(actor, public_id, v["reason"], v["notes"]),
        default_return="/moderation/disclosures",
    )


async def webhook_delete(request: Request, actor: Account) -> console.Action:
    webhook_id = request.path_params["webhook_id"]
    hook = await console.subject_or_404(webhooks.moderation_subject, webhook_id, "webhook", "webhook")
    return console.Action(
        subject=hook,
        run=lambda v: service.delete_webhook(actor, webhook_id, v["reason"], v["notes"]),
        default_return=repo_path(*hook.repository.split("/")) + "/maintain",
    )


routes: list[BaseRoute] = [
    Route("/moderation", reports_page, methods=["GET"], name="moderation"),
    Route("/moderation/repositories", repositories_page, methods=["GET"], name="moderation_repositories"),
    Route("/moderation/accounts", accounts_page, methods=["GET"], name="moderation_accounts"),
    Route("/moderation/held", held_page, methods=["GET"], name="moderation_held"),
    Route("/moderation/disclosures", disclosures_page, methods=["GET"], name="moderation_disclosures"),
    Route("/moderation/audit", audit_page, methods=["GET"], name="moderation_audit"),
    Route("/moderation/audit/{event_id:int}", audit_event_page, methods=["GET"], name="moderation_audit_event"),
    # each action: its path, what the path names, its form and the form's own fields (reason and notes: every form's)
    action_route("/moderation/scans/{scan_id:int}/visibility", scan_visibility, "_scan_form.html", ("visibility",)),
    action_route(
        "/moderation/repos/{host}/{owner}/{name}/listing",
        repository_listing,
        "_repository_form.html",
        ("listing_status",),
    ),
    action_route("/moderation/accounts/{handle}", account_change, "_account_form.html", ("platform_role", "state")),
    action_route("/moderation/accounts/{handle}/statements", account_statements_hide, "_statements_hide_form.html"),
    action_route("/moderation/accounts/{handle}/signal", account_signal_pin, "_signal_form.html", ("pin",)),
    action_route("/moderation/accounts/{handle}/release", account_held_release, "_release_form.html"),
    action_route(
        "/moderation/repos/{host}/{owner}/{name}/maintainers/{handle}", maintainer_end, "_maintainer_form.html"
    ),
    action_route(
        "/moderation/statements/{statement_id:int}", statement_visibility, "_statement_form.html", ("visibility",)
    ),
    action_route("/moderation/webhooks/{webhook_id:int}", webhook_delete, "_webhook_form.html"),
    action_route(
        "/moderation/disclosures/{canonical_public_id}/extend",
        disclosure_extend,
        "_disclosure_extend_form.html",
        ("days",),
    ),
    action_route(
        "/moderation/disclosures/{canonical_public_id}/publish", disclosure_publish, "_disclosure_publish_form.html"
    ),
]
