"""Data for the site's tests, created the real way: source rows (tests/factories.py), the write-path hooks, then
the projection drain, exactly as a submitted report reaches the atlas."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypeVar

from app.accounts.models import Account
from app.infestations.dirty_queue import drain_all
from app.kernel import db
from app.record.outbox import mark_dirty
from app.registry.models import Repository
from app.reports.finding_memory import pattern_key
from tests import factories, sql

T = TypeVar("T")

HOSTILE_TITLE = "<script>alert(1)</script> SQL injection in login"
HOSTILE_NAME = '"><svg onload=alert(1)>'


@dataclass
class SeededPattern:
    key: str
    title: str
    repositories: list[Repository] = field(default_factory=list)
    occurrence_ids: list[str] = field(default_factory=list)


async def account() -> Account:
    return await factories.create_account()


async def seed_pattern(
    title: str,
    *,
    repos: int,
    instances: int | None = None,
    owner: str = "acme",
    name_prefix: str = "svc",
    status: str = "open",
    submitter: Account | None = None,
    start: datetime | None = None,
) -> SeededPattern:
    """`repos` listed repositories sharing `title`, with `instances` canonical findings spread round-robin over
    them (default one each), each with a distinct updated_at (one minute apart, newest last), then projected."""
    submitter = submitter or await account()
    count = instances if instances is not None else repos
    start = start or db.utcnow() - timedelta(days=2)
    seeded = SeededPattern(key=pattern_key(title), title=title)
    for i in range(repos):
        seeded.repositories.append(await factories.create_repository(owner, f"{name_prefix}-{i:03d}"))
    for i in range(count):
        repository = seeded.repositories[i % repos]
        scan = await factories.create_scan(repository, submitter)
        stamp = start + timedelta(minutes=i)
        canonical = await factories.create_canonical(
            repository,
            title,
            status=status,
            file_path=f"src/module_{i:03d}.py",
            commit_sha=scan.commit_sha,
            updated_at=stamp,
            inserted_at=stamp,
        )
        await factories.create_occurrence(scan, canonical)
    seeded.occurrence_ids = await occurrence_public_ids(seeded.key)
    await project([seeded.key])
    return seeded


async def project(keys: list[str]) -> int:
    async with db.transaction() as session:
        await mark_dirty(session, keys, "backfill")
    return await drain_all()


async def occurrence_public_ids(key: str) -> list[str]:
    """Public ids of the key's occurrences, oldest first (server defaults are not loaded on the ORM rows)."""
    found = await sql.rows(
        "SELECT f.public_id FROM scan_findings f JOIN canonical_findings c ON c.id = f.canonical_finding_id "
        "WHERE c.pattern_key = :key ORDER BY f.id",
        key=key,
    )
    return [str(row["public_id"]) for row in found]


def run_async(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine from a sync browser test: in its own thread and event loop (the sync Playwright API and
    pytest-asyncio's session loop both live on the main thread), disposing that loop's engines at the end."""

    async def wrapper() -> T:
        try:
            return await make()
        finally:
            await db.dispose_engines()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, wrapper()).result()
