"""The scoped refresh (docs/domain.md §5.2 "Scoped refresh"): a dirty key names the repositories whose rows changed,
and its drain re-projects only those from source. On random data changed through the real write paths (reports,
moderation, status changes), every drain leaves exactly what a full refresh of every key leaves."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

from prometheus_client import REGISTRY
from sqlalchemy import text

from app.accounts.models import Account
from app.infestations import dirty_queue
from app.kernel import db
from app.moderation.service import change_repository_listing, change_scan_visibility, delete_repository
from app.record import outbox
from app.reports.service import submit_report
from tests import factories as f
from tests.infestations.support import LONELY, clear_projection, random_registry, refresh_each_key, snapshot
from tests.sql import rows

TITLES = [f"Random pattern {n} in handler" for n in range(14)]  # random_registry's titles: reports hit its keys
FILES = ("app/handler.py", "app/views.py", "lib/util.py")
REASON, NOTES = "scoped test", "a change made by the scoped refresh test"


def scoped_refreshes() -> float:
    return REGISTRY.get_sample_value("tarakan_infestations_refreshes_total", {"scope": "repositories"}) or 0.0


async def a_report(rng: random.Random, reporter: Account, moderator: Account) -> str:
    repo = rng.choice(await rows("SELECT host, owner, name FROM repositories WHERE listing_status = 'listed'"))
    findings = [
        {"file": rng.choice(FILES), "severity": "high", "title": rng.choice(TITLES), "description": "d"}
        for _ in range(rng.randint(1, 3))
    ]
    body = {
        "commit_sha": f.sha(rng.random()),
        "model": "test-model",
        "prompt_version": "test/v1",
        "document": {"tarakan_scan_format": 1, "findings": findings},
    }
    await submit_report(reporter, repo["host"], repo["owner"], repo["name"], body)
    return "report"


async def a_visibility_change(rng: random.Random, reporter: Account, moderator: Account) -> str:
    scan = rng.choice(await rows("SELECT id, visibility FROM scans ORDER BY id"))
    visibility = rng.choice([v for v in ("public", "public_summary", "restricted") if v != scan["visibility"]])
    await change_scan_visibility(moderator, scan["id"], visibility, REASON, NOTES)
    return f"visibility {visibility}"


async def a_listing_change(rng: random.Random, reporter: Account, moderator: Account) -> str:
    repo = rng.choice(await rows("SELECT host, owner, name, listing_status FROM repositories ORDER BY id"))
    listing = "listed" if repo["listing_status"] != "listed" else rng.choice(("quarantined", "pending"))
    await change_repository_listing(moderator, repo["host"], repo["owner"], repo["name"], listing, REASON, NOTES)
    return f"listing {listing}"


async def a_status_change(rng: random.Random, reporter: Account, moderator: Account) -> str:
    """What a check or the quorum does to the rollups: a canonical's status moves, its key marked in its repository."""
    canonical = rng.choice(await rows("SELECT id, pattern_key, repository_id, status FROM canonical_findings"))
    status = rng.choice([s for s in ("open", "verified", "disputed", "fixed") if s != canonical["status"]])
    async with db.transaction() as session:
        await session.execute(
            text("UPDATE canonical_findings SET status = :s, updated_at = now() WHERE id = :id"),
            {"s": status, "id": canonical["id"]},
        )
        await outbox.mark_dirty(session, [canonical["pattern_key"]], "status", repository_id=canonical["repository_id"])
    return f"status {status}"


async def a_deletion(rng: random.Random, reporter: Account, moderator: Account) -> str:
    repo = rng.choice(await rows("SELECT host, owner, name FROM repositories ORDER BY id"))
    await delete_repository(repo["host"], repo["owner"], repo["name"], actor_id=moderator.id, reason=REASON)
    return "deletion"


Action = Callable[[random.Random, Account, Account], Awaitable[str]]
ACTIONS: tuple[Action, ...] = (
    *(a_report,) * 3,
    *(a_visibility_change,) * 2,
    *(a_status_change,) * 2,
    a_listing_change,
)


async def test_every_scoped_drain_leaves_what_a_full_refresh_of_every_key_leaves() -> None:
    rng = random.Random(2611)
    reporter = await f.create_account(platform_role="moderator")  # exempt from the submission rate limits
    moderator = await f.create_account(platform_role="moderator")
    await random_registry(rng, reporter)
    await refresh_each_key()
    lonely_scans = await rows(
        "SELECT DISTINCT f.scan_id FROM scan_findings f JOIN canonical_findings c ON c.id = f.canonical_finding_id "
        "WHERE c.pattern_key = :k ORDER BY 1",
        k=LONELY,
    )
    assert len(lonely_scans) == 2

    async def restrict(scan_id: int) -> str:
        await change_scan_visibility(moderator, scan_id, "restricted", REASON, NOTES)
        return "visibility restricted"

    steps: list[Callable[[], Awaitable[str]]] = [
        # the two-repository pattern loses one report, then the other: its last rows go in a scoped refresh
        *((lambda scan_id=s["scan_id"]: restrict(scan_id)) for s in lonely_scans),
        *((lambda action=rng.choice(ACTIONS): action(rng, reporter, moderator)) for _ in range(22)),
        lambda: a_deletion(rng, reporter, moderator),
    ]
    before = scoped_refreshes()
    for n, step in enumerate(steps):
        done = await step()
        queued = await rows("SELECT pattern_key, repository_ids FROM infestation_dirty_keys")
        assert all(q["repository_ids"] for q in queued), f"step {n} ({done}) marked whole keys: {queued}"
        await dirty_queue.drain_all()
        drained = await snapshot()
        await clear_projection()
        await refresh_each_key()
        assert drained == await snapshot(), f"step {n} ({done}): the scoped drain differs from a full refresh"
        if n == 1:
            assert LONELY not in {p["pattern_key"] for p in drained["infestation_patterns"]}
    assert scoped_refreshes() - before >= len(steps)  # at least one scoped refresh a step: none fell back to full


async def test_a_key_names_the_repositories_marked_under_it_until_a_mark_names_none() -> None:
    async def mark(key: str, repository_id: int | None) -> None:
        async with db.transaction() as session:
            await outbox.mark_dirty(session, [key], "status", repository_id=repository_id)

    async def scope(key: str) -> list[int] | None:
        found = await rows("SELECT repository_ids FROM infestation_dirty_keys WHERE pattern_key = :k", k=key)
        return found[0]["repository_ids"]  # type: ignore[no-any-return]

    for repository_id in (7, 3, 7):
        await mark("a", repository_id)
    assert await scope("a") == [3, 7]
    await mark("a", None)  # reconcile, the shadow sampler: the whole key
    await mark("a", 9)
    assert await scope("a") is None
    for repository_id in range(1, outbox.MAX_SCOPED_REPOSITORIES + 2):
        await mark("b", repository_id)
    assert await scope("b") is None  # too many repositories: the whole key is cheaper than the list
