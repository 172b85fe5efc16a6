"""The signal an account's outcomes give (docs/domain.md "Earned trust"): precision = (verified + 2) / (decided + 4)
over the last 365 days, so a new account stands at exactly 0.5 and one verdict moves it little; the gate it sets
(held for review below `SIGNAL_FLOOR` once 10 findings are decided; a moderator's pin wins; moderators and admins
are never gated); and the stored copy the report path reads (`account_signals`)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.kernel.config import ConfigError
from app.reports.policy import HIGH_MIN_DECIDED, HIGH_SIGNAL  # twice the daily quota at or above

PRIOR_VERIFIED, PRIOR_DECIDED = 2, 4
WINDOW_DAYS = 365
GATE_MIN_DECIDED = 10  # below it nobody is gated: a few early disputes are not a record
REASONS_SHOWN = 10


def signal_floor() -> float:
    """`SIGNAL_FLOOR` (default 0.3), read at call time like the other runtime settings."""
    raw = os.environ.get("SIGNAL_FLOOR", "0.3")
    try:
        value = float(raw)
    except ValueError as exc:
        raise ConfigError(f"SIGNAL_FLOOR must be a number between 0 and 1, not {raw!r}") from exc
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"SIGNAL_FLOOR must be a number between 0 and 1, not {raw!r}")
    return value


def precision(verified: int, decided: int) -> float:
    return (verified + PRIOR_VERIFIED) / (decided + PRIOR_DECIDED)


@dataclass(frozen=True)
class Counts:
    decided: int = 0
    verified: int = 0
    disputed: int = 0
    withdrawn: int = 0
    refused: int = 0

    @property
    def precision(self) -> float:
        return precision(self.verified, self.decided)


def gated(counts: Counts, pin: str | None, *, moderator: bool) -> bool:
    """Whether an account's new findings are held for review."""
    if moderator:
        return False
    if pin is not None:
        return pin == "gated"
    return counts.decided >= GATE_MIN_DECIDED and counts.precision < signal_floor()


def high_signal(counts: Counts) -> bool:
    return counts.decided >= HIGH_MIN_DECIDED and counts.precision >= HIGH_SIGNAL


_COUNTS = text("""
SELECT o.account_id,
       count(*) AS decided,
       count(*) FILTER (WHERE o.outcome = 'verified') AS verified,
       count(*) FILTER (WHERE o.outcome = 'disputed') AS disputed,
       count(*) FILTER (WHERE o.outcome = 'withdrawn') AS withdrawn,
       count(*) FILTER (WHERE o.outcome = 'refused') AS refused
FROM finding_outcomes o
WHERE o.account_id = ANY(CAST(:ids AS bigint[])) AND o.decided_at >= now() - make_interval(days => :days)
GROUP BY o.account_id
""")

_ACCOUNTS = text("""
SELECT a.id, a.platform_role IN ('moderator', 'admin') AS moderator, g.pin
FROM accounts a LEFT JOIN account_signals g ON g.account_id = a.id
WHERE a.id = ANY(CAST(:ids AS bigint[]))
""")

_STORE = text("""
INSERT INTO account_signals AS g (account_id, decided, verified, precision, gated, updated_at)
VALUES (:account_id, :decided, :verified, :precision, :gated, now())
ON CONFLICT (account_id) DO UPDATE SET
  decided = EXCLUDED.decided, verified = EXCLUDED.verified, precision = EXCLUDED.precision, gated = EXCLUDED.gated,
  updated_at = now()
WHERE (g.decided, g.verified, g.gated) IS DISTINCT FROM (EXCLUDED.decided, EXCLUDED.verified, EXCLUDED.gated)
""")

# accounts with a stored signal or any outcome in the window (the daily pass: outcomes age out of the 365 days)
_EVERY_ACCOUNT = text("""
SELECT account_id FROM account_signals
UNION SELECT DISTINCT account_id FROM finding_outcomes WHERE decided_at >= now() - make_interval(days => :days)
""")


async def counts_of(session: AsyncSession, account_ids: Iterable[int]) -> dict[int, Counts]:
    ids = sorted(set(account_ids))
    rows = await session.execute(_COUNTS, {"ids": ids, "days": WINDOW_DAYS})
    return {int(r.account_id): Counts(r.decided, r.verified, r.disputed, r.withdrawn, r.refused) for r in rows}


async def store_signals(session: AsyncSession, account_ids: Iterable[int]) -> int:
    """Count and store the signal of each account (its gate included); returns how many rows changed."""
    ids = sorted(set(account_ids))
    if not ids:
        return 0
    counts = await counts_of(session, ids)
    changed = 0
    for row in await session.execute(_ACCOUNTS, {"ids": ids}):
        tally = counts.get(int(row.id), Counts())
        values = {
            "account_id": int(row.id),
            "decided": tally.decided,
            "verified": tally.verified,
            "precision": tally.precision,
            "gated": gated(tally, row.pin, moderator=bool(row.moderator)),
        }
        result = await session.execute(_STORE, values)
        changed += int(result.rowcount or 0)  # type: ignore[attr-defined]
    return changed


async def every_account(session: AsyncSession) -> list[int]:
    return [int(r[0]) for r in await session.execute(_EVERY_ACCOUNT, {"days": WINDOW_DAYS})]


_REASONS = text("""
SELECT outcome, reason, decided_at FROM finding_outcomes
WHERE account_id = :account_id AND decided_at >= now() - make_interval(days => :days)
ORDER BY decided_at DESC, id DESC LIMIT :limit
""")

_STORED = text("SELECT gated, pin, pin_reason FROM account_signals WHERE account_id = :account_id")


@dataclass(frozen=True)
class Signal:
    counts: Counts
    gated: bool
    pin: str | None
    reasons: list[str]


def _day(at: datetime) -> str:
    return f"{at.day} {at:%b %Y}"


async def signal_of(session: AsyncSession, account_id: int) -> Signal:
    """An account's signal now, with the reasons of its newest outcomes in words ("... on 3 Dec 2026")."""
    counts = (await counts_of(session, [account_id])).get(account_id, Counts())
    stored = (await session.execute(_STORED, {"account_id": account_id})).first()
    rows = await session.execute(_REASONS, {"account_id": account_id, "days": WINDOW_DAYS, "limit": REASONS_SHOWN})
    reasons = [f"{r.reason} on {_day(r.decided_at)}" for r in rows]
    if stored is not None and stored.pin is not None:
        reasons.insert(0, f"a moderator set the gate {'closed' if stored.pin == 'gated' else 'open'}")
    return Signal(counts, bool(stored.gated) if stored is not None else False, stored.pin if stored else None, reasons)
