"""Model-based test: whatever happens to the public join set, once the projection has drained, the rollup read
equals the legacy read from source for every window and status (and the show page equals the all-time aggregate).

Hypothesis drives the write paths through the real services (report submission, scan visibility and repository
listing moderation); a status change is a direct update plus `outbox.mark_dirty`, as the demo seed does. Time
passing is simulated by moving every stored timestamp back (`shift_clock`), followed by the hourly window
recompute. The state machine is synchronous, so its coroutines run on an event loop of its own in a helper thread
(never the session loop pytest-asyncio owns), whose engines and pools are disposed when the test ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test
from sqlalchemy import text

from app.accounts.models import Account
from app.infestations import dirty_queue, maintenance
from app.infestations.legacy import get_infestation_legacy, list_infestations_legacy
from app.infestations.memberships import list_pattern_repos_page
from app.infestations.queries import (
    get_infestation,
    list_infestations_rollup,
    list_instances_page,
)
from app.kernel import db
from app.kernel.errors import DomainError
from app.kernel.queue import close_pools
from app.kernel.sql import statement
from app.moderation.account_actions import change_account
from app.moderation.service import change_repository_listing, change_scan_visibility
from app.record import outbox
from app.record.public import public_join
from app.registry.models import Repository
from app.reports.checks import record_check
from app.reports.finding_memory import pattern_key
from app.reports.service import submit_report
from tests import factories
from tests.conftest import empty_tables
from tests.infestations.support import shift_clock

T = TypeVar("T")

TITLES = (
    "SQL injection via string concatenation",
    "Reflected XSS via q param",
    "Hard-coded credentials in configuration",
    "Path traversal in upload handler",
)
KEYS = tuple(pattern_key(t) for t in TITLES)
REPOSITORIES = 5
REVIEWERS = 3
WINDOWS = (7, 30, 90, 365)
STATUS_FILTERS: tuple[str | None, ...] = (None, "open", "verified", "disputed", "fixed")
# everything but first_seen_at, which is window-scoped in legacy and all-time in the rollup list (docs/domain.md §5.7)
LIST_FIELDS = (
    *("pattern_key", "title", "severity", "sample_file_path", "sample_occurrence_public_id"),
    *("repo_count", "instance_count", "open_count", "verified_count", "fixed_count", "disputed_count"),
    "last_seen_at",
)
READS_AT_ONCE = 4  # of the pool's connections (2 x DB_POOL_SIZE)
REASON, NOTES = "model test", "randomized moderation step of the model-based test"


async def side_by_side(reads: Iterable[Awaitable[T]]) -> list[T]:
    """Independent reads (each on its own pooled connection) run together, a few at a time: the step waits for the
    slowest rather than for the sum of their round trips."""
    gate = asyncio.Semaphore(READS_AT_ONCE)

    async def one(read: Awaitable[T]) -> T:
        async with gate:
            return await read

    return list(await asyncio.gather(*(one(read) for read in reads)))


class LoopThread:
    """One event loop in a helper thread for the whole test (never the session loop pytest-asyncio owns): the sync
    state machine hands it one coroutine per step, and its connection pool stays warm between steps."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="rollup-model-loop", daemon=True)
        self.thread.start()

    def run(self, step: Callable[[], Awaitable[T]]) -> T:
        async def call() -> T:
            return await step()

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result()

    def close(self) -> None:
        async def release() -> None:
            await close_pools()
            await db.dispose_engines()

        try:
            self.run(release)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()


LOOP: LoopThread | None = None


def run(step: Callable[[], Awaitable[T]]) -> T:
    assert LOOP is not None, "the model runs inside test_rollup_read_always_equals_the_legacy_read"
    return LOOP.run(step)


class RollupModel(RuleBasedStateMachine):
    reporter: Account
    moderator: Account
    reviewers: list[Account]
    repositories: list[Repository]

    @initialize()
    def fresh_registry(self) -> None:
        empty_tables()

        async def setup() -> None:
            # moderators are exempt from the submission rate limits; the second one moderates the first's reports
            self.reporter = await factories.create_account(platform_role="moderator")
            self.moderator = await factories.create_account(platform_role="moderator")
            self.repositories = [await factories.create_repository() for _ in range(REPOSITORIES)]
            # qualified checkers: their human checks move canonical statuses through the real quorum
            self.reviewers = [
                await factories.create_account(trust_tier="reviewer", state="active") for _ in range(REVIEWERS)
            ]

        run(setup)
        self.scan_ids: list[int] = []
        self.commits = 0

    def step(self, action: Callable[[], Awaitable[Any]], *, clock_jumped: bool = False) -> None:
        async def body() -> None:
            with contextlib.suppress(DomainError):  # e.g. "is already listed": a no-op step; the invariant holds
                await action()
            await self.assert_reads_inside_the_join_set()  # between the change and the drain: the read-time guard
            await dirty_queue.drain_all()
            if clock_jumped:
                await maintenance.recompute_all_windows()
            await self.assert_rollup_equals_legacy()

        run(body)

    async def assert_reads_inside_the_join_set(self) -> None:
        """No public read shows a row outside the current public join set, drained or not (docs/domain.md §5.7):
        every sample and ledger or satellite occurrence it names is an occurrence of a public report on a listed
        repository right now."""
        async with db.read_session(replica=False) as session:
            visible = {
                str(public_id)
                for public_id in (
                    await session.execute(
                        statement(
                            "SELECT f.public_id FROM scan_findings f JOIN scans s ON s.id = f.scan_id "
                            "JOIN repositories r ON r.id = s.repository_id WHERE {public}",
                            public=public_join(),
                        )
                    )
                ).scalars()
            }
        shown: list[str | None] = []
        for listed in await side_by_side(list_infestations_rollup(days=days, limit=100) for days in WINDOWS):
            shown += [i["sample_occurrence_public_id"] for i in listed]
        for item in await side_by_side(get_infestation(key) for key in KEYS):
            shown += [item["sample_occurrence_public_id"]] if item else []
        for page in await side_by_side(list_instances_page(key, limit=100) for key in KEYS):
            shown += [e["occurrence_public_id"] for e in page["entries"]]
        for page in await side_by_side(list_pattern_repos_page(key, limit=100) for key in KEYS):
            shown += [e["occurrence_public_id"] for e in page["entries"]]
        assert {s for s in shown if s is not None} <= visible

    async def assert_rollup_equals_legacy(self) -> None:
        filters = [(days, status) for days in WINDOWS for status in STATUS_FILTERS]
        legacy = await side_by_side(list_infestations_legacy(days=d, status=s, limit=100) for d, s in filters)
        rollup = await side_by_side(list_infestations_rollup(days=d, status=s, limit=100) for d, s in filters)
        for (days, status), expected, got in zip(filters, legacy, rollup, strict=True):
            assert [tuple(i[f] for f in LIST_FIELDS) for i in got] == [
                tuple(i[f] for f in LIST_FIELDS) for i in expected
            ], (days, status)
        legacy_shows = await side_by_side(get_infestation_legacy(key) for key in KEYS)
        rollup_shows = await side_by_side(get_infestation(key) for key in KEYS)
        for key, expected_show, got_show in zip(KEYS, legacy_shows, rollup_shows, strict=True):
            assert got_show == expected_show, key

    @rule(
        repo=st.integers(0, REPOSITORIES - 1),
        title=st.integers(0, len(TITLES) - 1),
        path=st.integers(0, 2),
        severity=st.sampled_from(("critical", "high", "low")),
    )
    def submit_finding(self, repo: int, title: int, path: int, severity: str) -> None:
        """A report with one finding; the same path and title in the same repository re-detects its canonical."""
        self.commits += 1
        repository = self.repositories[repo]
        body = {
            "commit_sha": factories.sha(("model", self.commits)),
            "model": "model-test",
            "prompt_version": "model/v1",
            "document": {
                "tarakan_scan_format": 1,
                "findings": [
                    {
                        "file": f"src/module{path}.py",
                        "line_start": 10,
                        "severity": severity,
                        "title": TITLES[title],
                        "description": "Found by the model-based test.",
                    }
                ],
            },
        }

        async def submit() -> None:
            created = await submit_report(self.reporter, repository.host, repository.owner, repository.name, body)
            self.scan_ids.append(int(created["id"]))

        self.step(submit)

    @rule(pick=st.integers(0, 10_000), status=st.sampled_from(("open", "verified", "disputed", "fixed")))
    def change_status(self, pick: int, status: str) -> None:
        """A quorum outcome, written directly (as the seed does): status and updated_at move, the key is dirtied."""

        async def change() -> None:
            async with db.transaction() as session:
                ids = (await session.execute(text("SELECT id FROM canonical_findings ORDER BY id"))).scalars().all()
                if not ids:
                    return
                key = (
                    await session.execute(
                        text(
                            "UPDATE canonical_findings SET status = :s, updated_at = now() "
                            "WHERE id = :id AND status <> :s RETURNING pattern_key"
                        ),
                        {"s": status, "id": ids[pick % len(ids)]},
                    )
                ).scalar_one_or_none()
                await outbox.mark_dirty(session, [key], "status")
            await outbox.schedule_refresh_after_commit()

        self.step(change)

    @rule(pick=st.integers(0, 10_000), visibility=st.sampled_from(("public", "public_summary", "restricted")))
    def flip_visibility(self, pick: int, visibility: str) -> None:
        if not self.scan_ids:
            return
        scan_id = self.scan_ids[pick % len(self.scan_ids)]
        self.step(lambda: change_scan_visibility(self.moderator, scan_id, visibility, REASON, NOTES))

    @rule(
        pick=st.integers(0, 10_000),
        reviewer=st.integers(0, REVIEWERS - 1),
        verdict=st.sampled_from(("confirmed", "disputed", "fixed")),
    )
    def check_finding(self, pick: int, reviewer: int, verdict: str) -> None:
        """A qualified human check at the canonical's last seen commit, through the real check service (refused
        checks, e.g. a repeated one or a commit seen only in a hidden report, leave everything unchanged)."""

        async def check() -> None:
            async with db.read_session(replica=False) as session:
                rows = (
                    await session.execute(
                        text("SELECT public_id, last_seen_commit_sha FROM canonical_findings ORDER BY id")
                    )
                ).all()
            if not rows:
                return
            public_id, commit = rows[pick % len(rows)]
            body = {
                "commit_sha": commit,
                "verdict": verdict,
                "provenance": "human",
                "notes": "Checked by the model-based test at this commit.",
            }
            await record_check(self.reviewers[reviewer], str(public_id), body, client_ip=f"198.51.100.{reviewer + 1}")

        self.step(check)

    @rule(reviewer=st.integers(0, REVIEWERS - 1), state=st.sampled_from(("active", "suspended")))
    def change_reviewer_state(self, reviewer: int, state: str) -> None:
        """An account change: authority revalidation recomputes the statuses its checks supported."""
        handle = self.reviewers[reviewer].handle
        self.step(lambda: change_account(self.moderator, handle, state=state, reason=REASON, notes=NOTES))

    @rule(repo=st.integers(0, REPOSITORIES - 1), listing=st.sampled_from(("listed", "pending", "quarantined")))
    def flip_listing(self, repo: int, listing: str) -> None:
        r = self.repositories[repo]
        self.step(lambda: change_repository_listing(self.moderator, r.host, r.owner, r.name, listing, REASON, NOTES))

    @rule(days=st.sampled_from((1, 6, 25, 60, 300)))
    def jump_clock(self, days: int) -> None:
        """Whole days only: a row inside a window at refresh time cannot cross its edge before the read."""
        self.step(lambda: shift_clock(days), clock_jumped=True)


def test_rollup_read_always_equals_the_legacy_read() -> None:
    global LOOP
    LOOP = LoopThread()
    try:
        run_state_machine_as_test(
            RollupModel,
            settings=settings(
                max_examples=15,
                stateful_step_count=20,
                deadline=None,
                database=None,
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )
    finally:
        LOOP.close()
        LOOP = None
