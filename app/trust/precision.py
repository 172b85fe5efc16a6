"""Precision published (docs/domain.md "Earned trust"): by provenance, by model and prompt version, by SARIF tool
and rule, a row a month. A row is shown only when at least `MIN_DECIDED` findings of at least `MIN_ACCOUNTS`
accounts were decided and no account holds more than half of them: a model only one account uses would be that
account's score, and no score of a person is public."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import TextClause
from sqlalchemy.ext.asyncio import AsyncSession

from app.kernel.sql import Fragment, statement
from app.trust.signal import precision

MIN_DECIDED = 5
MIN_ACCOUNTS = 3
MONTHS = 12
LABEL_CHARS = 100  # model, prompt version, tool and rule are self-reported: bounded where they are shown


_ROWS = """
WITH per_account AS (
  SELECT {keys}, date_trunc('month', decided_at) AS month, account_id, count(*) AS decided,
         count(*) FILTER (WHERE outcome = 'verified') AS verified
  FROM finding_outcomes
  WHERE decided_at >= date_trunc('month', now()) - make_interval(months => :months - 1) AND {present}
  GROUP BY {keys}, month, account_id
)
SELECT {keys}, month, sum(decided) AS decided, sum(verified) AS verified
FROM per_account
GROUP BY {keys}, month
HAVING sum(decided) >= :min_decided AND count(*) >= :min_accounts AND max(decided) * 2 <= sum(decided)
ORDER BY month DESC, decided DESC, {keys}
"""

# the three groupings: constant column lists of finding_outcomes, a row a month
GROUPINGS: dict[str, tuple[TextClause, tuple[str, ...]]] = {
    "by_provenance": (
        statement(_ROWS, keys=Fragment("provenance"), present=Fragment("provenance IS NOT NULL")),
        ("provenance",),
    ),
    "by_model": (
        statement(
            _ROWS,
            keys=Fragment("model, prompt_version"),
            present=Fragment("model IS NOT NULL AND prompt_version IS NOT NULL"),
        ),
        ("model", "prompt_version"),
    ),
    "by_tool_rule": (
        statement(_ROWS, keys=Fragment("tool, rule_id"), present=Fragment("tool IS NOT NULL AND rule_id IS NOT NULL")),
        ("tool", "rule_id"),
    ),
}


@dataclass(frozen=True)
class Row:
    keys: dict[str, str]
    month: str  # "2026-12"
    decided: int
    verified: int

    @property
    def precision(self) -> float:
        return round(precision(self.verified, self.decided), 4)

    def as_json(self) -> dict[str, Any]:
        return {**self.keys, "month": self.month, "decided": self.decided, "verified": self.verified,
                "precision": self.precision}  # fmt: skip


def _month(at: datetime) -> str:
    return f"{at:%Y-%m}"


async def precision_rows(session: AsyncSession) -> dict[str, list[Row]]:
    """Every grouping's rows (each present, empty or not)."""
    params = {"months": MONTHS, "min_decided": MIN_DECIDED, "min_accounts": MIN_ACCOUNTS}
    out: dict[str, list[Row]] = {}
    for name, (query, keys) in GROUPINGS.items():
        rows = await session.execute(query, params)
        out[name] = [
            Row(
                {key: str(getattr(r, key))[:LABEL_CHARS] for key in keys},
                _month(r.month),
                int(r.decided),
                int(r.verified),
            )
            for r in rows
        ]
    return out
