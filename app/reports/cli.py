"""`tarakan reports submit HOST/OWNER/NAME FILE --as EMAIL [--commit SHA]`: the same service as the API, acting as an
account. FILE holds a Scan Format v1 request body or a SARIF 2.1.0 log (recognised by its content)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from app.accounts.service import require_account_by_email
from app.kernel.cli import command, group
from app.kernel.errors import ValidationError
from app.kernel.refs import parse_ref
from app.reports.sarif import is_sarif, sarif_to_report


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


async def _submit(args: argparse.Namespace) -> int:
    from app.reports.service import submit_report

    host, owner, name = parse_ref(args.repository)
    body = read_body(args.file)
    sarif_report = None
    if is_sarif(body):  # by content, not by name (docs/sarif.md)
        sarif_report = sarif_to_report(body, commit_sha=args.commit)
        body = sarif_report.body
    elif args.commit is not None:
        raise ValidationError({"commit": ["applies to a SARIF log only (a Scan Format v1 body names its commit_sha)"]})
    account = await require_account_by_email(args.as_email)
    result = await submit_report(account, host, owner, name, body)
    if sarif_report is not None:
        result = result | {"sarif": sarif_report.summary()}
    print(json.dumps(result, indent=2))
    return 0


def register(sub: Any) -> None:
    """Add `reports submit` to the `tarakan` parser."""
    reports_sub = group(sub, "reports", "submit reports", metavar="COMMAND")
    submit = command(
        reports_sub, "submit", _submit, "submit a report (FILE: a request body or a SARIF 2.1.0 log, - for stdin)"
    )
    submit.add_argument("repository", metavar="HOST/OWNER/NAME")
    submit.add_argument("file", metavar="FILE")
    submit.add_argument("--as", dest="as_email", required=True, metavar="EMAIL")
    submit.add_argument("--commit", metavar="SHA", help="the commit of a SARIF log that does not name one")
