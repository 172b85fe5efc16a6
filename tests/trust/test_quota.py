"""A high signal (>= 0.8 over >= 20 decided findings) doubles the daily report quota; gates are not bans."""

from __future__ import annotations

import pytest

from app.kernel.errors import RateLimited
from app.reports.service import submit_report
from tests import factories
from tests.reports.support import finding, report_body
from tests.trust.test_outcomes import _decided


async def _send(account: object, n: int) -> None:
    repo = await factories.create_repository()
    body = report_body([finding(title=f"Quota probe {n}")], commit_sha=f"{n:040x}")
    await submit_report(account, repo.host, repo.owner, repo.name, body)  # type: ignore[arg-type]


async def test_a_high_signal_doubles_the_daily_quota() -> None:
    plain = await factories.create_account(state="probation")  # 3 reports a day
    for n in range(3):
        await _send(plain, n)
    with pytest.raises(RateLimited, match="daily quota of 3 reports"):
        await _send(plain, 3)

    trusted = await factories.create_account(state="probation")
    await _decided(trusted, verified=20, disputed=0)  # (20 + 2) / (20 + 4) = 0.92 over 20 decided
    for n in range(6):
        await _send(trusted, 10 + n)
    with pytest.raises(RateLimited, match="daily quota of 6 reports"):
        await _send(trusted, 20)
