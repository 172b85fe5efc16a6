"""The actor policy and the visibility rule, as tables: one place decides, every service asks."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from app.kernel.actors import ANONYMOUS, can_moderate, can_verify, is_privileged_viewer, viewer_of
from app.record.visibility import report_access, report_writable, repository_writable


@dataclass
class Someone:
    id: int = 7
    platform_role: str = "member"
    trust_tier: str = "new"
    state: str = "active"


@pytest.mark.parametrize(
    ("account", "moderates", "verifies", "privileged"),
    [
        (Someone(), False, False, False),
        (Someone(trust_tier="reviewer"), False, True, True),
        (Someone(trust_tier="reviewer", state="restricted"), False, False, False),
        (Someone(platform_role="moderator", state="probation"), True, True, True),
        (Someone(platform_role="admin", state="suspended"), False, False, False),
        (Someone(platform_role="moderator", state="banned"), False, False, False),
    ],
)
def test_standing_decides_with_the_role(account: Someone, moderates: bool, verifies: bool, privileged: bool) -> None:
    assert can_moderate(account) is moderates
    assert can_verify(account) is verifies
    assert is_privileged_viewer(account) is privileged
    assert viewer_of(account).privileged is privileged


def test_nobody_is_anonymous() -> None:
    assert viewer_of(None) is ANONYMOUS
    assert not can_moderate(None)


def test_reviewers_read_quarantined_repositories_but_only_the_submitter_and_moderators_write() -> None:
    reviewer = Someone(id=1, trust_tier="reviewer")
    assert report_access(viewer_of(reviewer), listing_status="quarantined", visibility="public") == "full"
    assert not repository_writable(reviewer, listing_status="quarantined", submitted_by_id=2)
    assert repository_writable(Someone(id=2), listing_status="quarantined", submitted_by_id=2)
    assert repository_writable(Someone(platform_role="moderator"), listing_status="quarantined", submitted_by_id=2)
    assert repository_writable(reviewer, listing_status="listed", submitted_by_id=2)
    assert report_access(ANONYMOUS, listing_status="quarantined", visibility="public") == "hidden"


def test_restricted_reports_take_verdicts_from_privileged_accounts_and_their_submitter() -> None:
    assert report_writable(Someone(id=2), visibility="restricted", submitted_by_id=2)
    assert report_writable(Someone(trust_tier="reviewer"), visibility="restricted", submitted_by_id=2)
    assert not report_writable(
        Someone(trust_tier="reviewer", state="suspended"), visibility="restricted", submitted_by_id=2
    )
    assert not report_writable(Someone(), visibility="restricted", submitted_by_id=2)
    assert report_writable(Someone(), visibility="public", submitted_by_id=2)
