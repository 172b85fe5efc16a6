"""`tarakan disclosures`: the clock run now (`publish-due [--now ISO-8601]`) and the open embargoes listed."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import Any

from sqlalchemy import text

from app.kernel.cli import command, group

NOW_FORMAT = "an ISO-8601 date-time with an offset, e.g. 2026-12-03T18:00:00+00:00"


def parse_now(raw: str) -> datetime | None:
    """`--now`'s value, or None when it is not an ISO-8601 date-time with an offset (a naive time names no instant)."""
    try:
        when = datetime.fromisoformat(raw.strip())
    except ValueError:
        return None
    return when if when.tzinfo is not None and when.utcoffset() is not None else None


async def _publish_due(args: argparse.Namespace) -> int:
    from app.disclosure.clock import publish_due

    now = None
    if args.now is not None:
        now = parse_now(args.now)
        if now is None:
            print(f"tarakan: error: --now {args.now!r}: must be {NOW_FORMAT}", file=sys.stderr)
            return 2
    published = await publish_due(now)
    print(f"published: {published} embargoed finding(s) whose deadline passed")
    return 0


# the open embargoes by deadline, as the public ledger shows them (never the reporter, no title or file)
_OPEN = text("""
SELECT r.host || '/' || r.owner || '/' || r.name AS repository, coalesce(c.severity, '-') AS severity,
       d.reported_at, d.deadline
FROM disclosures d JOIN repositories r ON r.id = d.repository_id
JOIN canonical_findings c ON c.id = d.canonical_finding_id
WHERE d.state = 'embargoed'
ORDER BY d.deadline, d.canonical_finding_id
""")


async def _list(args: argparse.Namespace) -> int:
    from app.kernel import db

    async with db.read_session(replica=False) as session:
        rows = (await session.execute(_OPEN)).all()
    if not rows:
        print("no open embargo")
        return 0
    print("repository\tseverity\treported\tdeadline")
    for row in rows:
        print(f"{row.repository}\t{row.severity}\t{row.reported_at.isoformat()}\t{row.deadline.isoformat()}")
    return 0


def register(sub: Any) -> None:
    """Add this feature's subcommands to the `tarakan` parser."""
    disclosures = group(sub, "disclosures", "coordinated disclosure")
    publish = command(
        disclosures, "publish-due", _publish_due, "publish every embargoed finding whose deadline passed, now"
    )
    publish.add_argument(
        "--now", metavar="ISO-8601", help=f"publish what is due as of this time ({NOW_FORMAT}; default: now)"
    )
    command(disclosures, "list", _list, "the open embargoes by deadline: repository, severity, reported, deadline")
