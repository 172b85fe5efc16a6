"""The actor policy and the visibility rule, each decision over every account state, role and tier it reads
(docs/domain.md §1.1-1.2, §1.6): the tables bench/mutation.py holds app/kernel/actors.py and visibility.py to."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

import pytest
from sqlalchemy import Text, column, table

from app.accounts.models import ACCOUNT_STATES, PLATFORM_ROLES, TRUST_TIERS
from app.kernel.actors import (
    ANONYMOUS,
    Viewer,
    can_change_roles,
    can_moderate,
    can_verify,
    has_moderator_role,
    in_good_standing,
    is_locked_out,
    is_privileged_viewer,
    is_qualified_reviewer,
    qualified_reviewer,
    require_good_standing,
    viewer_of,
)
from app.kernel.errors import Forbidden
from app.record.visibility import (
    report_access,
    report_writable,
    repository_visible,
    repository_writable,
    visible_visibilities,
)


@dataclass(frozen=True)
class Someone:
    id: int = 7
    platform_role: str = "member"
    trust_tier: str = "new"
    state: str = "active"


# every combination of the three attributes (one test each, not one per account: the suite's per-test setup costs)
EVERYONE = [
    Someone(state=s, platform_role=r, trust_tier=t) for s, r, t in product(ACCOUNT_STATES, PLATFORM_ROLES, TRUST_TIERS)
]


def test_every_decision_over_every_account() -> None:
    for who in EVERYONE:
        _decides(who)


def _decides(who: Someone) -> None:
    acting = who.state in ("probation", "active")
    moderator = who.platform_role in ("moderator", "admin")
    reviewer = who.trust_tier == "reviewer" or moderator
    assert in_good_standing(who) is acting
    assert is_locked_out(who) is (who.state in ("suspended", "banned"))
    assert has_moderator_role(who) is moderator
    assert is_qualified_reviewer(who) is reviewer
    assert can_moderate(who) is (moderator and acting)
    assert can_change_roles(who) is (who.platform_role == "admin" and acting)
    assert can_verify(who) is (reviewer and acting)
    assert is_privileged_viewer(who) is (reviewer and acting)
    assert viewer_of(who) == Viewer(account_id=7, privileged=reviewer and acting)


def test_an_account_that_may_not_act_is_a_403_naming_the_account_and_its_state() -> None:
    for state in ("restricted", "suspended", "banned"):
        with pytest.raises(Forbidden) as info:
            require_good_standing(Someone(state=state))
        assert info.value.errors == {"account": [f"is {state} and cannot act"]}
    for state in ("probation", "active"):
        require_good_standing(Someone(state=state))


def test_nobody_signed_in_decides_nothing() -> None:
    assert (can_moderate(None), can_change_roles(None), is_privileged_viewer(None)) == (False, False, False)
    assert viewer_of(None) is ANONYMOUS
    assert Viewer(account_id=None, privileged=False) == ANONYMOUS


def test_the_quorum_counts_the_same_reviewers_in_sql() -> None:
    accounts = table("accounts", column("trust_tier", Text), column("platform_role", Text))
    sql = str(qualified_reviewer(accounts).compile(compile_kwargs={"literal_binds": True}))
    assert sql == "accounts.trust_tier = 'reviewer' OR accounts.platform_role IN ('moderator', 'admin')"


PRIVILEGED, PUBLIC = Viewer(account_id=1, privileged=True), Viewer(account_id=1)


ACCESS = [  # listing, visibility, what the public sees (a privileged viewer sees everything in full)
    ("listed", "public", "full"),
    ("listed", "public_summary", "header"),
    ("listed", "restricted", "hidden"),
    ("pending", "public", "full"),
    ("quarantined", "public", "hidden"),
    ("quarantined", "public_summary", "hidden"),
    ("quarantined", "restricted", "hidden"),
]


def test_report_access() -> None:
    for listing, visibility, public in ACCESS:
        assert report_access(PUBLIC, listing_status=listing, visibility=visibility) == public
        assert report_access(ANONYMOUS, listing_status=listing, visibility=visibility) == public
        assert report_access(PRIVILEGED, listing_status=listing, visibility=visibility) == "full"
        assert repository_visible(PUBLIC, listing) is (listing != "quarantined")
        assert repository_visible(PRIVILEGED, listing) is True


def test_visible_visibilities_fetch_restricted_only_for_the_privileged() -> None:
    assert visible_visibilities(ANONYMOUS) == ["public", "public_summary"]
    assert visible_visibilities(PRIVILEGED) == ["public", "public_summary", "restricted"]


def test_writing_to_quarantine_and_to_restricted_reports() -> None:
    for who in EVERYONE:
        _writes(who)


def _writes(who: Someone) -> None:
    moderates = who.platform_role in ("moderator", "admin") and who.state in ("probation", "active")
    privileged = is_privileged_viewer(who)
    for listing in ("listed", "pending"):
        assert repository_writable(who, listing_status=listing, submitted_by_id=99) is True
    assert repository_writable(who, listing_status="quarantined", submitted_by_id=99) is moderates
    assert repository_writable(who, listing_status="quarantined", submitted_by_id=who.id) is True
    assert repository_writable(who, listing_status="quarantined", submitted_by_id=None) is moderates
    for visibility in ("public", "public_summary"):
        assert report_writable(who, visibility=visibility, submitted_by_id=99) is True
    assert report_writable(who, visibility="restricted", submitted_by_id=99) is privileged
    assert report_writable(who, visibility="restricted", submitted_by_id=who.id) is True
    assert report_writable(who, visibility="restricted", submitted_by_id=None) is privileged
