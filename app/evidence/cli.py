"""`tarakan evidence observe`: the daily observation run by hand, or one repository now (docs/domain.md
"Observations")."""

from __future__ import annotations

import argparse
from typing import Any

from app.kernel.cli import command, group
from app.kernel.errors import ValidationError


async def _observe(args: argparse.Namespace) -> int:
    from app.evidence.observe import observe, repository_id

    if args.limit < 1:
        raise ValidationError({"limit": ["must be at least 1"]})
    repository = await repository_id(args.repo) if args.repo else None
    result = await observe(repository=repository, limit=args.limit)
    for line in result.skipped:
        print(f"skipped: {line}")
    if result.left:
        print(f"left for a later run: {result.left} repository(ies) (their forge failed, or EVIDENCE_CHECK=off)")
    print(
        f"observed: {result.observed} finding(s) in {result.repositories} repository(ies), "
        f"{result.changed} change(s) announced"
    )
    return 0


async def _recheck(args: argparse.Namespace) -> int:
    from app.evidence.recheck import recheck_pending

    if args.limit < 1:
        raise ValidationError({"limit": ["must be at least 1"]})
    result = await recheck_pending(limit=args.limit)
    print(", ".join(f"{what}: {n}" for what, n in result.summary().items()))
    return 0


def register(sub: Any) -> None:
    """Add this feature's subcommands to the `tarakan` parser."""
    evidence = group(sub, "evidence", "evidence at the commit: observations, pending re-checks")
    observe = command(evidence, "observe", _observe, "is the code still there? observe the default branch's head")
    observe.add_argument(
        "--repo", metavar="HOST/OWNER/NAME", help="observe this listed repository now, even if observed today"
    )
    observe.add_argument("--limit", type=int, default=1000, metavar="N", help="at most N repositories (default: 1000)")
    recheck = command(
        evidence, "recheck", _recheck, "check the due pending reports at the forge now, as the worker does"
    )
    recheck.add_argument("--limit", type=int, default=16, metavar="N", help="at most N reports (default: 16)")
