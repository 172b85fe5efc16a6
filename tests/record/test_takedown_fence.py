"""The takedown fence (docs/scaling.md "Read replicas", docs/domain.md §12 decision 8): every audit event is numbered
at its commit, in commit order, so of two overlapping takedowns the one that allocated the lower audit id and
commits last still moves the fence past the other; every reader keyed by it (the render cache's version, the
takedown-keyed caches, the replica routing: tests/kernel/test_replica.py) sees that takedown at the next request.

The overlap is real: two connections, two transactions; the first allocates its audit id and stays open while the
second (the moderation service's own quarantine) allocates a higher one and commits; then the first commits.
"""

from __future__ import annotations

import asyncio

import httpx
from sqlalchemy import text

from app.accounts.models import Account
from app.kernel import db
from app.kernel.audit import record_audit
from app.moderation.service import change_repository_listing
from app.record import rendered
from app.registry import queries
from app.registry.models import Repository
from tests import factories

REASON, NOTES = "takedown", "taken down while another takedown was still committing"


class HeldQuarantine:
    """A repository quarantined as the moderation service writes it (the listing and its audit event, no feed
    entry: nothing else in the data version moves) in a transaction of its own, held open once its audit id is
    allocated, committed by `commit()`."""

    def __init__(self, repository: Repository) -> None:
        self.repository = repository
        self._allocated: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._release = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> int:
        """Open the transaction and write; the audit id it allocated."""
        self._task = asyncio.create_task(self._run())  # its own context: its own transaction and connection
        return await asyncio.wait_for(asyncio.shield(self._allocated), timeout=10)

    async def commit(self) -> None:
        assert self._task is not None
        self._release.set()
        await asyncio.wait_for(self._task, timeout=10)

    async def _run(self) -> None:
        try:
            await self._write()
        except BaseException as exc:
            if not self._allocated.done():  # failed before its audit event: `start` raises it
                self._allocated.set_exception(exc)
            raise

    async def _write(self) -> None:
        r = self.repository
        async with db.transaction() as session:
            await session.execute(
                text("UPDATE repositories SET listing_status = 'quarantined' WHERE id = :id"), {"id": r.id}
            )
            event = await record_audit(
                session,
                actor_id=None,
                action="repository.listing",
                subject_type="repository",
                subject_id=f"{r.host}/{r.owner}/{r.name}",
                before={"listing_status": "listed"},
                after={"listing_status": "quarantined"},
                reason=REASON,
                notes=NOTES,
            )
            self._allocated.set_result(event.id)
            await self._release.wait()


async def takedown_subjects() -> tuple[Repository, Repository, Account]:
    """Two listed repositories, `acme/first` and `acme/second`, and a moderator."""
    first, second = (
        await factories.create_repository("acme", "first"),
        await factories.create_repository("acme", "second"),
    )
    return first, second, await factories.create_account(platform_role="moderator")


async def overlapping_takedowns(
    first: Repository, second: Repository, moderator: Account
) -> tuple[HeldQuarantine, int]:
    """Start the quarantine of `first` (held open), then quarantine `second` through the moderation service (it
    commits); returns the held one and the audit id the second got, which is the higher."""
    held = HeldQuarantine(first)
    low = await held.start()
    outcome = await change_repository_listing(
        moderator, second.host, second.owner, second.name, "quarantined", REASON, NOTES
    )
    assert outcome.audit_event_id > low, "the takedown that commits first holds the higher audit id"
    return held, outcome.audit_event_id


async def fence() -> int:
    async with db.read_session(replica=False) as session:
        return await db.takedown_fence(session)


async def test_the_fence_moves_past_a_takedown_that_commits_after_a_higher_audit_id(
    client: httpx.AsyncClient,
) -> None:
    first, second, moderator = await takedown_subjects()
    before = await fence()
    held, high = await overlapping_takedowns(first, second, moderator)
    seen = await fence()
    assert seen > before, "the committed takedown moved the fence"
    await held.commit()
    assert await fence() > seen, "the takedown with the lower audit id committed last: the fence moved again"
    async with db.read_session(replica=False) as session:
        numbers = (await session.execute(text("SELECT id, fence FROM audit_events ORDER BY fence"))).all()
    assert [event_id for event_id, _ in numbers][-2:] == [high, high - 1], "numbered in commit order, not id order"


async def test_the_render_cache_and_the_search_cache_see_a_takedown_that_commits_after_a_higher_audit_id(
    client: httpx.AsyncClient,
) -> None:
    first, second, moderator = await takedown_subjects()
    badge = f"/repos/{first.host}/{first.owner}/{first.name}/badge.svg"
    store = rendered.cache()
    assert store is not None

    def names(response: httpx.Response) -> list[str]:
        assert response.status_code == 200, response.text
        return sorted(item["name"] for item in response.json()["items"])

    held, _ = await overlapping_takedowns(first, second, moderator)
    # the second takedown is seen; the first has not committed: its repository is still public, and is kept so
    assert (await client.get(badge)).status_code == 200
    hits = store.hits
    assert (await client.get(badge)).status_code == 200 and store.hits == hits + 1, "kept under this version"
    assert names(await client.get("/search.json?q=acme")) == ["first"]
    loads = queries.search_cache.cache.loads

    await held.commit()
    # the next request: the render cache's version and the search cache's key moved, well within their lifetimes
    assert (await client.get(badge)).status_code == 404, "the kept badge was served across the takedown"
    assert names(await client.get("/search.json?q=acme")) == [], "the cached search was served across the takedown"
    assert queries.search_cache.cache.loads == loads + 1
