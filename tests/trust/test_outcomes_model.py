"""Model-based test: whatever reports, checks, restrictions and refusals happen, after the worker's incremental run
a recompute from source finds no outcome it missed, and every recorded outcome stays (outcomes latch)."""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test
from sqlalchemy import text

from app.kernel import db
from app.kernel.errors import DomainError
from app.moderation.service import change_scan_visibility
from app.reports.checks import record_check
from app.reports.service import submit_report
from app.trust import refresh as trust_refresh
from app.trust.outcomes import record_outcomes
from app.trust.refresh import refresh
from tests import factories
from tests.conftest import empty_tables
from tests.infestations import test_rollup_model as rollup_model
from tests.infestations.test_rollup_model import LoopThread
from tests.reports.support import check_body, finding, report_body

TITLES = ("SQL injection in login", "Hardcoded secret in config", "Open redirect in callback")
NOTES = "randomized moderation step of the earned-trust model test"


class _RolledBack(Exception):
    pass


async def _missed() -> int:
    """How many outcomes a pass over the whole source would add now (in a transaction rolled back)."""
    moved = 0
    with contextlib.suppress(_RolledBack):
        async with db.transaction() as session:
            before = (await session.execute(text("SELECT count(*) FROM finding_outcomes"))).scalar_one()
            await record_outcomes(session, None)
            after = (await session.execute(text("SELECT count(*) FROM finding_outcomes"))).scalar_one()
            moved = int(after) - int(before)
            raise _RolledBack
    return moved


async def _recorded() -> set[tuple[Any, ...]]:
    async with db.read_session(replica=False) as session:
        rows = await session.execute(text("SELECT canonical_finding_id, refusal_id, outcome FROM finding_outcomes"))
        return {tuple(r) for r in rows}


class OutcomesModel(RuleBasedStateMachine):
    @initialize()
    def fresh(self) -> None:
        empty_tables()  # what truncate_all leaves, without new files for every table

        async def setup() -> None:
            self.reporters = [await factories.create_account(platform_role="moderator") for _ in range(2)]
            self.moderator = await factories.create_account(platform_role="moderator")
            self.repo = await factories.create_repository()

        rollup_model.run(setup)
        self.scans: list[int] = []
        self.commits = 0
        self.seen: set[tuple[Any, ...]] = set()

    @rule(reporter=st.integers(0, 1), title=st.sampled_from(TITLES), new_commit=st.booleans())
    def report(self, reporter: int, title: str, new_commit: bool) -> None:
        self.commits += int(new_commit)
        body = report_body([finding(title=title)], commit_sha=f"{self.commits:040x}")

        async def go() -> None:
            answer = await submit_report(
                self.reporters[reporter], self.repo.host, self.repo.owner, self.repo.name, body
            )
            self.scans.append(int(answer["id"]))

        rollup_model.run(go)

    @rule(title=st.sampled_from(TITLES), verdict=st.sampled_from(("confirmed", "disputed", "fixed")))
    def check(self, title: str, verdict: str) -> None:
        async def go() -> None:
            async with db.read_session(replica=False) as session:
                row = (
                    await session.execute(
                        text("SELECT public_id, last_seen_commit_sha FROM canonical_findings WHERE title = :t"),
                        {"t": title},
                    )
                ).first()
            if row is None:
                return
            reviewer = await factories.create_account(trust_tier="reviewer", state="active")
            # refused when no public occurrence is at that commit (its report was restricted), as in life
            with contextlib.suppress(DomainError):
                await record_check(reviewer, str(row[0]), check_body(verdict=verdict, commit_sha=row[1]))

        rollup_model.run(go)

    @rule(data=st.data())
    def restrict(self, data: st.DataObject) -> None:
        if not self.scans:
            return
        scan_id = data.draw(st.sampled_from(self.scans))

        async def go() -> None:
            with contextlib.suppress(DomainError):  # already restricted
                await change_scan_visibility(self.moderator, scan_id, "restricted", "model test", NOTES)

        rollup_model.run(go)

    @rule(reporter=st.integers(0, 1))
    def refuse(self, reporter: int) -> None:
        async def go() -> None:
            async with db.transaction() as session:
                await session.execute(
                    text("INSERT INTO report_refusals (account_id, reason) VALUES (:a, 'commit_sha: not found')"),
                    {"a": self.reporters[reporter].id},
                )

        rollup_model.run(go)

    @rule()
    def worker(self) -> None:
        rollup_model.run(refresh)
        assert rollup_model.run(_missed) == 0
        recorded = rollup_model.run(_recorded)
        assert self.seen <= recorded  # nothing recorded is ever undone
        self.seen = recorded

    @invariant()
    def outcomes_never_vanish(self) -> None:
        if hasattr(self, "seen"):
            assert self.seen <= rollup_model.run(_recorded)


def test_incremental_outcomes_equal_a_recompute_from_source(monkeypatch: pytest.MonkeyPatch) -> None:
    # no look-back: the steps run one after another, and the look-back would hide a fact the run's query missed
    monkeypatch.setattr(trust_refresh, "LOOKBACK", timedelta(0))
    rollup_model.LOOP = LoopThread()
    try:
        run_state_machine_as_test(
            OutcomesModel,
            settings=settings(
                max_examples=8, stateful_step_count=10, deadline=None, suppress_health_check=list(HealthCheck)
            ),
        )
    finally:
        rollup_model.LOOP.close()
        rollup_model.LOOP = None
