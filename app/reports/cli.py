"""`tarakan reports submit HOST/OWNER/NAME FILE --as EMAIL`: the same service as the API, acting as an account."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from app.accounts.models import Account
from app.accounts.service import get_account_by_email
from app.kernel.errors import NotFound, ValidationError


def parse_repository(raw: str) -> tuple[str, str, str]:
    parts = raw.strip().strip("/").split("/")
    if len(parts) != 3 or not all(p.strip() for p in parts):
        raise ValidationError({"repository": ["must be HOST/OWNER/NAME"]})
    return parts[0], parts[1], parts[2]


def read_body(path: str) -> dict[str, Any]:
    """FILE holds the API request body; `-` reads it from stdin."""
    try:
        if path == "-":
            raw = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as handle:
                raw = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValidationError({"file": [f"cannot be read ({exc.__class__.__name__})"]}) from None
    try:
        body = json.loads(raw)
    except ValueError:
        raise ValidationError({"file": ["must hold valid JSON"]}) from None
    if not isinstance(body, dict):
        raise ValidationError({"file": ["must hold a JSON object"]})
    return body


async def account_by_email(email: str) -> Account:
    account = await get_account_by_email(email)
    if account is None:
        raise NotFound({"as": [f"no account with email {email}"]})
    return account


async def _submit(args: argparse.Namespace) -> int:
    from app.reports.service import submit_report

    host, owner, name = parse_repository(args.repository)
    body = read_body(args.file)
    account = await account_by_email(args.as_email)
    result = await submit_report(account, host, owner, name, body)
    print(json.dumps(result, indent=2))
    return 0


def register(sub: Any) -> None:
    """Add `reports submit` to the `tarakan` parser."""
    from app.cli import command

    reports = sub.add_parser("reports", help="submit reports", description="submit reports")
    reports_sub = reports.add_subparsers(dest="reports_command", required=True, metavar="COMMAND")
    submit = command(reports_sub, "submit", _submit, "submit a report (FILE holds the API request body, - for stdin)")
    submit.add_argument("repository", metavar="HOST/OWNER/NAME")
    submit.add_argument("file", metavar="FILE")
    submit.add_argument("--as", dest="as_email", required=True, metavar="EMAIL")
