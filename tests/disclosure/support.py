"""An embargoed report made as a reporter makes one (a repository window of 30 days, then a report through the one
submit path), and the clock's end as the worker ends it; shared by the coordinated-disclosure tests."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text

from app.disclosure.actions import Extension, moderator_extend
from app.infestations.dirty_queue import drain_all
from app.kernel import db
from app.registry.models import Repository
from app.reports.embargo import publish_embargoed
from app.reports.service import submit_report
from tests import factories
from tests.reports.support import finding, report_body

EMBARGO_DAYS = 30

_WINDOW = text("UPDATE repositories SET disclosure_days = :days WHERE id = :id")
_OCCURRENCES = text("""
SELECT f.public_id, f.held_reason, f.published_at, c.id AS canonical_id, c.public_id AS canonical_public_id
FROM scan_findings f JOIN canonical_findings c ON c.id = f.canonical_finding_id
WHERE f.scan_id = :scan_id ORDER BY f.position
""")


@dataclass(frozen=True)
class Embargoed:
    repository: Repository
    slug: str  # host/owner/name
    scan_id: int
    commit_sha: str
    occurrences: list[str]  # the occurrences' public ids
    canonicals: list[int]  # their canonical findings' ids
    canonical_public_ids: list[str]


async def repository_window(repository: Repository, days: int) -> None:
    """A maintainer's window on the repository (what `PUT .../disclosure` sets)."""
    async with db.transaction() as session:
        await session.execute(_WINDOW, {"days": days, "id": repository.id})


async def embargoed_report(
    owner: str, name: str, titles: list[tuple[str, str]], *, days: int = EMBARGO_DAYS, commit_sha: str = "e" * 40
) -> Embargoed:
    """A listed repository with a `days` window, and one report of `titles` ((file, title) each, severity high)
    submitted to it: every finding held by the embargo."""
    repository = await factories.create_repository(owner, name)
    await repository_window(repository, days)
    author = await factories.create_account(state="active")
    body = report_body([finding(title=title, file=path) for path, title in titles], commit_sha=commit_sha)
    report = await submit_report(author, "github.com", owner, name, body)
    async with db.read_session(replica=False) as session:
        rows = (await session.execute(_OCCURRENCES, {"scan_id": report["id"]})).all()
    assert [(r.held_reason, r.published_at) for r in rows] == [("embargo", None)] * len(titles), rows
    await drain_all()
    return Embargoed(
        repository=repository,
        slug=f"github.com/{owner}/{name}",
        scan_id=int(report["id"]),
        commit_sha=commit_sha,
        occurrences=[str(r.public_id) for r in rows],
        canonicals=[int(r.canonical_id) for r in rows],
        canonical_public_ids=[str(r.canonical_public_id) for r in rows],
    )


async def clock_ends(canonicals: list[int], because: str = "deadline") -> list[int]:
    """The clock publishes these canonicals now, as the worker does at their deadline; the rollups drained after."""
    async with db.transaction() as session:
        ended = await publish_embargoed(session, canonicals, because)
    await drain_all()
    return ended


async def moderator_extends(canonical_public_id: str, days: int, reason: str) -> None:
    """A moderator's extension of a clock (the console's action, without its audit row): the stub shows it."""
    async with db.transaction() as session:
        await moderator_extend(session, canonical_public_id, Extension(days=days, reason=reason))
