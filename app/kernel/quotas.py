"""Per-account daily quotas: one rule for every write an account may repeat (docs/domain.md §9, docs/security.md).

Reports (`app.reports.policy`) and repository registrations (`app.registry.service`) each count the account's own
rows of the last day in their own tables, under the account row they have locked, and ask `require_within_quota`:
the limit by standing (reviewer tier, active, others), moderators and admins exempt (their good standing is
required by the caller before), and past it a 429 with `Retry-After` naming the quota.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.kernel.errors import RateLimited
from app.kernel.policy import REVIEWER_TIER, Actor, has_moderator_role

DAY_SECONDS = 86400


@dataclass(frozen=True)
class DailyQuota:
    """How many of `noun` an account may create per rolling day, by standing."""

    noun: str
    reviewer: int
    active: int
    other: int

    def limit_for(self, actor: Actor) -> int:
        if actor.trust_tier == REVIEWER_TIER:
            return self.reviewer
        if actor.state == "active":
            return self.active
        return self.other


def exempt_from_quotas(actor: Actor) -> bool:
    """Moderators and admins are not rate-limited (they clean up after floods)."""
    return has_moderator_role(actor)


def require_within_quota(actor: Actor, quota: DailyQuota, used_today: int) -> None:
    """RateLimited (429, `Retry-After` one day) when `used_today` reached the actor's daily limit."""
    if exempt_from_quotas(actor):
        return
    limit = quota.limit_for(actor)
    if used_today >= limit:
        raise RateLimited({"rate_limit": [f"daily quota of {limit} {quota.noun} reached"]}, retry_after=DAY_SECONDS)
