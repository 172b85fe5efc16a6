"""`tarakan repos add|delete` and `tarakan seed --demo`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from app.cli import command
from app.kernel.errors import NotFound, ValidationError
from app.registry.models import LISTING_STATUSES


async def _repos_add(args: argparse.Namespace) -> int:
    from app.registry.api import repository_json
    from app.registry.service import register_repository
    from app.registry.validation import parse_repo_ref

    host, owner, name = parse_repo_ref(args.repository)
    repository, created = await register_repository(host, owner, name, listing_status=args.listing)
    print(json.dumps({**repository_json(repository), "created": created}, indent=2))
    return 0


async def _repos_delete(args: argparse.Namespace) -> int:
    from app.accounts.service import get_account_by_email
    from app.registry.service import delete_repository
    from app.registry.validation import parse_repo_ref

    host, owner, name = parse_repo_ref(args.repository)
    actor = await get_account_by_email(args.actor)
    if actor is None:
        raise NotFound({"as": [f"no account with email {args.actor.strip().lower()}"]})
    await delete_repository(host, owner, name, actor_id=actor.id, reason=args.reason, notes=args.notes)
    print(f"deleted {host}/{owner}/{name}; its infestation patterns are queued for recount")
    return 0


async def _seed(args: argparse.Namespace) -> int:
    from app.seed import seed_demo

    if not args.demo:
        raise ValidationError({"demo": ["pass --demo (the demo data set is the only seed)"]})
    summary = await seed_demo(if_empty=args.if_empty)
    if summary.get("skipped"):
        print(f"seed: skipped ({summary['reason']})")
        return 0
    print(
        "seed: {repositories} repositories, {reports_submitted} reports submitted ({reports_skipped} already "
        "there), {patterns} patterns, {rollups_refreshed} rollup keys refreshed".format(**summary)
    )
    print(f"seed: moderator login {summary['moderator_email']} / {summary['password']}")
    return 0


def register(sub: Any) -> None:
    """Add this feature's subcommands to the `tarakan` parser."""
    repos = sub.add_parser("repos", help="manage repositories", description="manage repositories")
    repos_sub = repos.add_subparsers(dest="repos_command", required=True, metavar="ACTION")
    add = command(repos_sub, "add", _repos_add, "register a repository (prints it as JSON; existing ones unchanged)")
    add.add_argument("repository", metavar="HOST/OWNER/NAME")
    add.add_argument("--listing", default="listed", metavar="|".join(LISTING_STATUSES))
    remove = command(repos_sub, "delete", _repos_delete, "hard-delete a repository with its reports (moderators)")
    remove.add_argument("repository", metavar="HOST/OWNER/NAME")
    remove.add_argument("--as", dest="actor", required=True, metavar="EMAIL", help="the moderator or admin acting")
    remove.add_argument("--reason", default=None)
    remove.add_argument("--notes", default=None)

    seed = command(sub, "seed", _seed, "load the demo data set (domain §10)")
    seed.add_argument("--demo", action="store_true", help="the demo registry: accounts, repositories, patterns")
    seed.add_argument("--if-empty", action="store_true", help="do nothing when any repository exists")
