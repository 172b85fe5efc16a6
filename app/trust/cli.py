"""`tarakan trust`: earned trust kept current now, recomputed from source, or one account's signal read."""

from __future__ import annotations

import argparse
import json
from typing import Any

from app.kernel import db
from app.kernel.cli import command, group
from app.kernel.errors import NotFound


async def _refresh(args: argparse.Namespace) -> int:
    from app.trust.refresh import recompute, refresh

    result = await (recompute() if args.all else refresh())
    print(f"earned trust: {result['accounts']} accounts counted, {result['signals_changed']} signals changed")
    return 0


async def _signal(args: argparse.Namespace) -> int:
    from sqlalchemy import text

    from app.trust.signal import signal_of

    async with db.read_session(replica=False) as session:
        found = (
            await session.execute(text("SELECT id FROM accounts WHERE handle = :h"), {"h": args.handle.strip().lower()})
        ).scalar_one_or_none()
        if found is None:
            raise NotFound({"handle": [f"no account @{args.handle}"]})
        signal = await signal_of(session, int(found))
    counts = signal.counts
    print(json.dumps({"precision": round(counts.precision, 4), "decided": counts.decided, "verified": counts.verified,
                      "gated": signal.gated, "pin": signal.pin, "reasons": signal.reasons}))  # fmt: skip
    return 0


def register(sub: Any) -> None:
    actions = group(sub, "trust", "earned trust")
    refresh = command(actions, "refresh", _refresh, "record new outcomes and the signals they move")
    refresh.add_argument("--all", action="store_true", help="recompute from source and count every account again")
    signal = command(actions, "signal", _signal, "print one account's signal (moderators read everyone's)")
    signal.add_argument("--handle", required=True)
