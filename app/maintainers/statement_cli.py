"""`tarakan statements add`: a maintainer's statement on a canonical finding, through the same validation, secrets
scan and service as the API (docs/domain.md "Maintainers")."""

from __future__ import annotations

import argparse
import json
from typing import Any

from app.accounts.service import require_account_by_email
from app.kernel.answers import as_json
from app.kernel.cli import command, group
from app.maintainers.models import VEX_JUSTIFICATIONS, VEX_STATUSES


async def _add(args: argparse.Namespace) -> int:
    from app.kernel.intake import off_loop
    from app.maintainers.statement_types import statement_answer
    from app.maintainers.statements import prepare_statement, record_statement

    body = {
        "status": args.status,
        "justification": args.justification,
        "impact_statement": args.impact,
        "action_statement": args.action,
        "fixed_in": args.fixed_in,
    }
    statement = await off_loop(lambda budget: prepare_statement(body, budget))
    account = await require_account_by_email(args.as_email)
    view = await record_statement(account.id, args.canonical_id, statement)
    print(json.dumps(as_json(statement_answer(view)), indent=2))
    return 0


def register(sub: Any) -> None:
    """Add this feature's statement subcommands to the `tarakan` parser."""
    statements = group(sub, "statements", "maintainers' OpenVEX statements on findings")
    add = command(statements, "add", _add, "record a statement on a canonical finding as its maintainer (prints it)")
    add.add_argument("canonical_id", metavar="CANONICAL_ID", help="the canonical finding's public id")
    add.add_argument("--status", required=True, metavar="S", help=" | ".join(VEX_STATUSES))
    add.add_argument("--justification", metavar="J", help="not_affected: " + " | ".join(VEX_JUSTIFICATIONS))
    add.add_argument("--impact", metavar="TEXT", help="not_affected: why the code is not affected")
    add.add_argument("--action", metavar="TEXT", help="affected (required): what users should do")
    add.add_argument("--fixed-in", dest="fixed_in", metavar="SHA", help="fixed: the fixing commit (40 hex)")
    add.add_argument("--as", dest="as_email", required=True, metavar="EMAIL")
