"""`tarakan accounts create` and `tarakan tokens create`."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from app.accounts.models import ACCOUNT_STATES, PLATFORM_ROLES, TRUST_TIERS
from app.kernel.cli import command, group
from app.kernel.errors import ValidationError


async def _accounts_create(args: argparse.Namespace) -> int:
    from app.accounts.service import account_json, create_account

    password: str | None = None
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
        if not password:
            raise ValidationError({"password": ["--password-stdin was given but stdin held no password"]})
    account = await create_account(
        args.email,
        args.handle,
        platform_role=args.role,
        trust_tier=args.trust_tier,
        state=args.state,
        password=password,
    )
    print(json.dumps(account_json(account), indent=2))
    return 0


async def _tokens_create(args: argparse.Namespace) -> int:
    from app.accounts.service import create_token, require_account_by_email

    account = await require_account_by_email(args.email, field="email")
    token = await create_token(account.id, args.scopes.split(","))
    print(f"API token for {account.handle} ({args.scopes}); it is shown only once:")
    print(token)  # alone on the last line, so scripts can take `tail -n 1`
    return 0


def register(sub: Any) -> None:
    """Add this feature's subcommands to the `tarakan` parser."""
    accounts_sub = group(sub, "accounts", "manage accounts")
    create = command(accounts_sub, "create", _accounts_create, "create an account and print it as JSON")
    create.add_argument("email")
    create.add_argument("--handle", required=True)
    # values are checked by the service (exit 1 with one line naming the field), not by argparse choices
    create.add_argument("--role", default="member", metavar="|".join(PLATFORM_ROLES))
    create.add_argument("--trust-tier", default="new", metavar="|".join(TRUST_TIERS))
    create.add_argument("--state", default="probation", metavar="|".join(ACCOUNT_STATES))
    create.add_argument(
        "--password-stdin", action="store_true", help="read a web login password (>= 12 chars) from stdin's first line"
    )

    tokens_sub = group(sub, "tokens", "manage API tokens")
    token_create = command(tokens_sub, "create", _tokens_create, "issue an API token; prints it once, on the last line")
    token_create.add_argument("email")
    token_create.add_argument(
        "--scopes", required=True, help="comma-separated, e.g. findings:submit,repositories:write"
    )
