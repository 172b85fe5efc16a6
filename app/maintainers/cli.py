"""`tarakan maintainers claim|verify|recheck`: the same services as the API, acting as an account (claim, verify),
and the daily recheck run by hand (docs/domain.md "Maintainers")."""

from __future__ import annotations

import argparse
import json
from typing import Any

from app.accounts.service import require_account_by_email
from app.kernel.answers import as_json
from app.kernel.cli import command, group
from app.kernel.errors import ValidationError
from app.kernel.refs import parse_ref
from app.kernel.text import ascii_int


async def _claim(args: argparse.Namespace) -> int:
    from app.maintainers.service import claim_repository
    from app.maintainers.types import claim_answer

    host, owner, name = parse_ref(args.repository)
    account = await require_account_by_email(args.as_email)
    view, _created = await claim_repository(account.id, host, owner, name)
    print(json.dumps(as_json(claim_answer(view)), indent=2))
    return 0


async def _verify(args: argparse.Namespace) -> int:
    from app.maintainers.service import verify_claim
    from app.maintainers.types import claim_answer

    claim_id = ascii_int(args.claim_id)
    if claim_id is None or not 0 < claim_id < 2**63:
        raise ValidationError({"claim_id": ["must be a claim id (a positive integer)"]})
    account = await require_account_by_email(args.as_email)
    print(json.dumps(as_json(claim_answer(await verify_claim(account.id, claim_id))), indent=2))
    return 0


async def _recheck(args: argparse.Namespace) -> int:
    from app.maintainers.recheck import recheck_maintainers

    ended = await recheck_maintainers()
    for item in ended:
        print(f"ended: @{item.handle} no longer maintains {item.repository} ({item.reason})")
    print(f"rechecked: {len(ended)} maintainership(s) ended")
    return 0


def register(sub: Any) -> None:
    """Add this feature's subcommands to the `tarakan` parser."""
    maintainers = group(sub, "maintainers", "maintainer claims and their recheck")
    claim = command(maintainers, "claim", _claim, "claim a repository as an account (prints the claim and its token)")
    claim.add_argument("repository", metavar="HOST/OWNER/NAME")
    claim.add_argument("--as", dest="as_email", required=True, metavar="EMAIL")
    verify = command(maintainers, "verify", _verify, "verify a claim against the forge's .tarakan/verify.txt")
    verify.add_argument("claim_id", metavar="CLAIM_ID")
    verify.add_argument("--as", dest="as_email", required=True, metavar="EMAIL")
    command(
        maintainers,
        "recheck",
        _recheck,
        "recheck every maintainer's file now (prints what ended; MAINTAINER_RECHECK_HOURS read at this run)",
    )
