"""Per-account daily quotas: one rule for every write an account may repeat (docs/architecture.md "The kernel's rules
in words": who may)."""

from __future__ import annotations

from dataclasses import dataclass

from app.kernel.actors import REVIEWER_TIER, Actor, has_moderator_role
from app.kernel.errors import RateLimited

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


def require_within_quota(actor: Actor, quota: DailyQuota, used_today: int, *, scale: int = 1) -> None:
    """RateLimited (429, `Retry-After` one day) when `used_today` reached the actor's daily limit (times `scale`)."""
    if exempt_from_quotas(actor):
        return
    limit = quota.limit_for(actor) * scale
    if used_today >= limit:
        raise RateLimited({"rate_limit": [f"daily quota of {limit} {quota.noun} reached"]}, retry_after=DAY_SECONDS)
