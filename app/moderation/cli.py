"""`tarakan moderate scan|repo|account ...`: the console's actions from the command line, on the same services;
and `tarakan repos delete` (the hard delete is a moderation action)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable
from typing import Any

from app.accounts.models import ACCOUNT_STATES, PLATFORM_ROLES, Account
from app.accounts.service import require_account_by_email
from app.kernel import purge
from app.kernel.cli import command, group
from app.kernel.refs import parse_ref
from app.registry.models import LISTING_STATUSES
from app.reports.models import VISIBILITIES


async def _report(outcome: Any, purges: list[purge.PurgeOutcome]) -> int:
    from app.moderation.service import describe_backlog, pending_rollup_backlog

    print(
        json.dumps(
            {
                "audit_event_id": outcome.audit_event_id,
                "action": outcome.action,
                "subject": f"{outcome.subject_type} {outcome.subject_id}",
                "before": outcome.before,
                "after": outcome.after,
            }
        )
    )
    print(f"atlas: {describe_backlog(await pending_rollup_backlog())}")
    _report_cache(purges)
    return 0


def _report_cache(purges: list[purge.PurgeOutcome]) -> None:
    """The shared cache's purge (done after the commit, before this line): nothing without VARNISH_PURGE_URLS."""
    notice = purge.notice(purges)
    if notice is not None:
        print(f"cache: {notice}")


async def _moderate(args: argparse.Namespace, action: Callable[[Account], Awaitable[Any]]) -> int:
    """One audited action by the moderator `--as` names, then what it recorded and the shared cache's purge."""
    actor = await require_account_by_email(args.as_email)
    with purge.collect() as purges:
        outcome = await action(actor)
    return await _report(outcome, purges)


async def _scan(args: argparse.Namespace) -> int:
    from app.moderation.service import change_scan_visibility

    return await _moderate(
        args, lambda actor: change_scan_visibility(actor, args.scan_id, args.visibility, args.reason, args.notes)
    )


async def _repo(args: argparse.Namespace) -> int:
    from app.moderation.service import change_repository_listing

    host, owner, name = parse_ref(args.repository)
    return await _moderate(
        args,
        lambda actor: change_repository_listing(actor, host, owner, name, args.listing, args.reason, args.notes),
    )


async def _account(args: argparse.Namespace) -> int:
    from app.moderation.account_actions import change_account

    return await _moderate(
        args,
        lambda actor: change_account(
            actor, args.handle, platform_role=args.role, state=args.state, reason=args.reason, notes=args.notes
        ),
    )


async def _statements(args: argparse.Namespace) -> int:
    from app.moderation.account_actions import hide_account_statements

    return await _moderate(args, lambda actor: hide_account_statements(actor, args.handle, args.reason, args.notes))


async def _signal(args: argparse.Namespace) -> int:
    from app.moderation.signal import pin_signal

    return await _moderate(args, lambda actor: pin_signal(actor, args.handle, args.pin, args.reason, args.notes))


async def _release(args: argparse.Namespace) -> int:
    from app.moderation.signal import release_queue

    return await _moderate(args, lambda actor: release_queue(actor, args.handle, args.reason, args.notes))


async def _repos_delete(args: argparse.Namespace) -> int:
    from app.moderation.service import delete_repository

    host, owner, name = parse_ref(args.repository)
    actor = await require_account_by_email(args.actor)
    with purge.collect() as purges:
        await delete_repository(host, owner, name, actor_id=actor.id, reason=args.reason, notes=args.notes)
    print(f"deleted {host}/{owner}/{name}; its infestation patterns are queued for recount")
    _report_cache(purges)
    return 0


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reason", required=True, help="reason code, 3-100 characters")
    parser.add_argument("--notes", required=True, help="evidence notes, 20-4000 characters")
    parser.add_argument("--as", dest="as_email", required=True, metavar="EMAIL", help="the acting moderator")


def register(sub: Any) -> None:
    """Add this feature's subcommands to the `tarakan` parser."""
    repos = group(sub, "repos", "manage repositories")
    remove = command(repos, "delete", _repos_delete, "hard-delete a repository with its reports (moderators)")
    remove.add_argument("repository", metavar="HOST/OWNER/NAME")
    remove.add_argument("--as", dest="actor", required=True, metavar="EMAIL", help="the moderator or admin acting")
    remove.add_argument("--reason", default=None)
    remove.add_argument("--notes", default=None)

    actions = group(sub, "moderate", "moderation actions (audited)")

    scan = command(actions, "scan", _scan, "change a report's visibility")
    scan.add_argument("scan_id", type=int, metavar="SCAN_ID")
    scan.add_argument("--visibility", required=True, choices=VISIBILITIES)
    _common(scan)

    repo = command(actions, "repo", _repo, "change a repository's listing status")
    repo.add_argument("repository", metavar="HOST/OWNER/NAME")
    repo.add_argument("--listing", required=True, choices=LISTING_STATUSES)
    _common(repo)

    account = command(actions, "account", _account, "change an account's platform role and/or state")
    account.add_argument("handle", metavar="HANDLE")
    account.add_argument("--role", choices=PLATFORM_ROLES)
    account.add_argument("--state", choices=ACCOUNT_STATES)
    _common(account)

    hide = command(actions, "statements", _statements, "hide every shown maintainer statement of an account")
    hide.add_argument("handle", metavar="HANDLE")
    _common(hide)

    pin = command(actions, "signal", _signal, "pin an account's gate (gated, open) or clear the pin")
    pin.add_argument("--handle", required=True, metavar="HANDLE")
    pin.add_argument("--pin", required=True, choices=("gated", "open", "clear"))
    _common(pin)

    release = command(actions, "release", _release, "publish every finding of an account held for review")
    release.add_argument("--handle", required=True, metavar="HANDLE")
    _common(release)
