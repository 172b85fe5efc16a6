"""The actor policy: who may act, who may moderate, who sees more than the public (docs/domain.md §1.6)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from sqlalchemy import ColumnElement, FromClause, or_

from app.kernel.errors import Forbidden

# Account states that may act (submit, check, moderate); the others are read-only or shut out.
ACTING_STATES = ("probation", "active")
# States that end every web session of the account at once and refuse new ones.
LOCKED_OUT_STATES = ("suspended", "banned")
MODERATOR_ROLES = ("moderator", "admin")
REVIEWER_TIER = "reviewer"


class Actor(Protocol):
    """The three account attributes the policy reads."""

    @property
    def state(self) -> str: ...

    @property
    def platform_role(self) -> str: ...

    @property
    def trust_tier(self) -> str: ...


def in_good_standing(actor: Actor) -> bool:
    """The account's state lets it act (probation or active)."""
    return actor.state in ACTING_STATES


def require_good_standing(actor: Actor) -> None:
    """Forbidden (403 naming `account`) unless the account may act: registering, submitting, checking."""
    if not in_good_standing(actor):
        raise Forbidden({"account": [f"is {actor.state} and cannot act"]})


def is_locked_out(actor: Actor) -> bool:
    return actor.state in LOCKED_OUT_STATES


def has_moderator_role(actor: Actor) -> bool:
    """The role alone, whatever the state: exemptions (rate limits, paused repositories) that apply only once
    the caller has already required good standing."""
    return actor.platform_role in MODERATOR_ROLES


def is_qualified_reviewer(actor: Actor) -> bool:
    """Reviewer tier or moderator role (the `verify_review` policy, state checked apart)."""
    return actor.trust_tier == REVIEWER_TIER or has_moderator_role(actor)


def qualified_reviewer(accounts: FromClause) -> ColumnElement[bool]:
    """`is_qualified_reviewer` as a condition on an accounts row (quorum counts in SQL)."""
    return or_(accounts.c.trust_tier == REVIEWER_TIER, accounts.c.platform_role.in_(MODERATOR_ROLES))


def can_moderate(actor: Actor | None) -> bool:
    """A moderator or admin in good standing: the only accounts that may moderate or delete."""
    return actor is not None and has_moderator_role(actor) and in_good_standing(actor)


def can_change_roles(actor: Actor | None) -> bool:
    """Only an admin in good standing grants or revokes a platform role; moderators change account states only
    (a moderator who could make moderators could step around "nobody moderates their own report" with a second
    account of their own; docs/domain.md §8)."""
    return actor is not None and actor.platform_role == "admin" and in_good_standing(actor)


def can_verify(actor: Actor) -> bool:
    """May record checks and report-level verdicts: a qualified reviewer in good standing."""
    return in_good_standing(actor) and is_qualified_reviewer(actor)


def is_privileged_viewer(actor: Actor | None) -> bool:
    """Sees restricted and summary-only reports and quarantined repositories in full: a reviewer, moderator or
    admin in good standing (docs/domain.md §1.1-1.2)."""
    return actor is not None and can_verify(actor)


@dataclass(frozen=True)
class Viewer:
    """Who is looking at a page: an account id (or none) and whether the policy lets it see more."""

    account_id: int | None = None
    privileged: bool = False


ANONYMOUS = Viewer()


class _Identified(Actor, Protocol):
    @property
    def id(self) -> int: ...


def viewer_of(account: _Identified | None) -> Viewer:
    """The `Viewer` for a signed-in account (or ANONYMOUS)."""
    if account is None:
        return ANONYMOUS
    return Viewer(account_id=account.id, privileged=is_privileged_viewer(account))
