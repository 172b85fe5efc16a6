"""`tarakan repos add` (the hard delete, a moderation action, is added to the same group by app.moderation.cli)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from app.kernel.answers import as_json
from app.kernel.cli import command, group
from app.kernel.refs import parse_ref
from app.registry.models import LISTING_STATUSES


async def _repos_add(args: argparse.Namespace) -> int:
    from app.registry.api import repository_json
    from app.registry.service import register_repository

    host, owner, name = parse_ref(args.repository)
    repository, created = await register_repository(host, owner, name, listing_status=args.listing)
    print(json.dumps({**as_json(repository_json(repository)), "created": created}, indent=2))
    return 0


def register(sub: Any) -> None:
    """Add this feature's subcommands to the `tarakan` parser."""
    repos = group(sub, "repos", "manage repositories")
    add = command(repos, "add", _repos_add, "register a repository (prints it as JSON; existing ones unchanged)")
    add.add_argument("repository", metavar="HOST/OWNER/NAME")
    add.add_argument("--listing", default="listed", metavar="|".join(LISTING_STATUSES))
