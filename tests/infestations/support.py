"""A small registry of known patterns across windows, shared by the rollup, legacy, shadow and cutover tests."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text

from app.accounts.models import Account
from app.infestations import projection
from app.kernel import db
from app.kernel.sql import statement
from app.record.public import public_join
from app.registry.models import Repository
from app.reports.finding_memory import pattern_key
from tests import factories
from tests.sql import one, rows

WINDOW_DAYS = (7, 30, 90, 365)
STATUS_FILTERS: tuple[str | None, ...] = (None, "open", "verified", "disputed", "fixed")
COMPARED = (
    *("pattern_key", "repo_count", "instance_count", "open_count"),
    *("verified_count", "fixed_count", "disputed_count", "last_seen_at"),
)


def ago(days: float) -> datetime:
    return db.utcnow() - timedelta(days=days)


def ranked(items: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What parity means: same keys, same order, same counts and last_seen_at (first_seen_at differs by design)."""
    return [tuple(item[k] for k in COMPARED) for item in items]


# ---------------------------------------------------------------------------------------------------------------
# A registry that spans every window, shared with the shadow-compare, cutover and model tests.


@dataclass(frozen=True)
class Spec:
    title: str
    repo: int  # index into the listed repositories; -1 pending, -2 quarantined
    age_days: float
    status: str = "open"
    visibilities: tuple[str, ...] = ("public",)


HARDCODED = "Hard-coded credentials in configuration"
SQLI = "SQL injection via string concatenation"
XSS = "Reflected XSS via q param"
TRAVERSAL = "Path traversal in upload handler"
LONER = "Debug endpoint left enabled"

SPECS = (
    # one canonical in each window band, five repositories
    Spec(HARDCODED, 0, 3),
    Spec(HARDCODED, 1, 20, "verified"),
    Spec(HARDCODED, 2, 60, "fixed"),
    Spec(HARDCODED, 3, 200, "disputed"),
    Spec(HARDCODED, 4, 400),
    Spec(HARDCODED, 0, 21, "verified"),  # a second canonical in repository 0
    # two repositories within 7 days; unlisted repositories never count
    Spec(SQLI, 0, 3),
    Spec(SQLI, 1, 2),
    Spec(SQLI, 2, 20, "verified"),
    Spec(SQLI, 3, 400, "fixed"),
    Spec(SQLI, -1, 1),
    Spec(SQLI, -2, 1),
    # a canonical re-detected by three public reports; summary-only and restricted-only canonicals do not count
    Spec(XSS, 0, 5, "open", ("public", "public", "public")),
    Spec(XSS, 1, 5, "open", ("public_summary",)),
    Spec(XSS, 2, 6, "open", ("restricted", "public")),
    Spec(XSS, 3, 4, "open", ("restricted",)),
    Spec(XSS, 4, 60, "verified"),
    Spec(XSS, 5, 200, "disputed"),
    # status tallies spread over windows
    Spec(TRAVERSAL, 0, 20, "verified"),
    Spec(TRAVERSAL, 1, 25, "verified"),
    Spec(TRAVERSAL, 2, 60, "fixed"),
    Spec(TRAVERSAL, 3, 70, "fixed"),
    Spec(TRAVERSAL, 4, 200, "disputed"),
    Spec(TRAVERSAL, 5, 210, "disputed"),
    Spec(TRAVERSAL, 5, 3, "open", ("public", "public_summary")),
    # one repository only: never ranks
    Spec(LONER, 0, 3),
    Spec(LONER, 0, 4),
)
TITLES = (HARDCODED, SQLI, XSS, TRAVERSAL, LONER)


async def build_registry(specs: tuple[Spec, ...] = SPECS) -> list[Repository]:
    """Source rows for `specs`; returns the six listed repositories (pending and quarantined ones are extra)."""
    author = await factories.create_account()
    listed = [await factories.create_repository() for _ in range(6)]
    others = {
        -1: await factories.create_repository(listing_status="pending"),
        -2: await factories.create_repository(listing_status="quarantined"),
    }
    for spec in specs:
        repo = listed[spec.repo] if spec.repo >= 0 else others[spec.repo]
        stamp = ago(spec.age_days)
        canonical = None
        for n, visibility in enumerate(spec.visibilities):
            scan = await factories.create_scan(repo, author, visibility=visibility, inserted_at=stamp + timedelta(n))
            if canonical is None:
                canonical = await factories.create_canonical(
                    repo,
                    spec.title,
                    status=spec.status,
                    commit_sha=scan.commit_sha,
                    updated_at=stamp,
                    inserted_at=stamp - timedelta(days=1),
                )
            await factories.create_occurrence(scan, canonical)
    return listed


async def refresh_all(titles: tuple[str, ...] = TITLES) -> None:
    for title in titles:
        await projection.refresh_pattern(pattern_key(title), reason="backfill")


async def shift_clock(days: float) -> None:
    """Simulate `days` passing: every stored timestamp, source and rollup, moves back by that much."""
    interval = {"d": timedelta(days=days)}
    window_columns = ", ".join(f"last_seen_at_{w}d = last_seen_at_{w}d - :d" for w in WINDOW_DAYS)
    statements = [
        "UPDATE canonical_findings SET updated_at = updated_at - :d, inserted_at = inserted_at - :d",
        "UPDATE scans SET inserted_at = inserted_at - :d, updated_at = updated_at - :d",
        "UPDATE infestation_pattern_instances SET updated_at = updated_at - :d, inserted_at = inserted_at - :d",
        "UPDATE infestation_pattern_repos SET first_seen_at = first_seen_at - :d, last_seen_at = last_seen_at - :d",
        "UPDATE infestation_patterns SET first_seen_at = first_seen_at - :d, last_seen_at = last_seen_at - :d, "
        f"refreshed_at = refreshed_at - :d, {window_columns}",
        "UPDATE infestation_pattern_status_windows SET last_seen_at = last_seen_at - :d",
    ]
    async with db.transaction() as session:
        for statement in statements:
            await session.execute(text(statement), interval)


async def back_rollups_with_visible_rows(*, reuse: bool = False) -> None:
    """Rollup rows written straight in SQL (ranking or paging input) have no source behind them, so the read-time
    guard would hide them all: give every pattern without instances one visible instance (a listed repository's
    public report), and every pattern and membership without a sample that report's occurrence. `reuse` backs them
    with the first visible report already stored instead of a new one (tests that count every public URL)."""
    if reuse:
        first_visible = await one(
            statement(
                "SELECT s.repository_id AS repo, s.id AS scan, s.commit_sha AS sha, f.public_id AS occ "
                "FROM scan_findings f JOIN scans s ON s.id = f.scan_id "
                "JOIN repositories r ON r.id = s.repository_id "
                "WHERE {public} ORDER BY f.id LIMIT 1",
                public=public_join(),
            )
        )
        assert first_visible is not None, "reuse=True needs a visible report stored"
        params = first_visible
    else:
        author = await factories.create_account()
        repo = await factories.create_repository()
        scan, _, occurrence = await factories.create_instance(repo, author, "Backing sample")
        params = {"repo": repo.id, "scan": scan.id, "sha": scan.commit_sha, "occ": occurrence.public_id}
    async with db.transaction() as session:
        await session.execute(
            text(
                "WITH bare AS (SELECT p.pattern_key, p.title FROM infestation_patterns p WHERE NOT EXISTS "
                "  (SELECT 1 FROM infestation_pattern_instances i WHERE i.pattern_key = p.pattern_key)), "
                "canonicals AS (INSERT INTO canonical_findings (repository_id, fingerprint, pattern_key, title, "
                "  status, first_seen_commit_sha, last_seen_commit_sha) "
                "  SELECT :repo, 'backing-' || pattern_key, pattern_key, title, 'open', :sha, :sha FROM bare "
                "  RETURNING id, pattern_key, title, inserted_at, updated_at) "
                "INSERT INTO infestation_pattern_instances (canonical_finding_id, pattern_key, repository_id, status, "
                "  title, sample_occurrence_public_id, sample_scan_id, sample_commit_sha, inserted_at, updated_at) "
                "SELECT id, pattern_key, :repo, 'open', title, :occ, :scan, :sha, inserted_at, updated_at "
                "FROM canonicals"
            ),
            params,
        )
        for table in ("infestation_patterns", "infestation_pattern_repos"):
            await session.execute(
                text(
                    f"UPDATE {table} SET sample_occurrence_public_id = :occ WHERE sample_occurrence_public_id IS NULL"
                ),
                params,
            )
        await session.execute(text("ANALYZE infestation_patterns"))


# ---------------------------------------------------------------------------------------------------------------
# The whole projection as rows, and the per-key reference it is compared with (backfill, scoped refresh).

TABLES = {
    "infestation_pattern_instances": "canonical_finding_id",
    "infestation_pattern_repos": "pattern_key, repository_id",
    "infestation_patterns": "pattern_key",
    "infestation_pattern_status_windows": "pattern_key, status, window_days",
}
CLOCKS = ("inserted_at", "updated_at", "refreshed_at")  # when a row was written, not what it says


async def snapshot() -> dict[str, list[dict[str, Any]]]:
    return {
        table: [
            {k: v for k, v in row.items() if not (table != "infestation_pattern_instances" and k in CLOCKS)}
            for row in await rows(f"SELECT * FROM {table} ORDER BY {order}")
        ]
        for table, order in TABLES.items()
    }


async def clear_projection() -> None:
    async with db.transaction() as session:
        for table in TABLES:
            await session.execute(text(f"DELETE FROM {table}"))


async def refresh_each_key() -> None:
    """The reference: one `refresh_pattern` per key of the source and of the projection."""
    keys = await rows(
        "SELECT pattern_key FROM canonical_findings WHERE pattern_key <> '' "
        "UNION SELECT pattern_key FROM infestation_patterns"
    )
    for row in keys:
        await projection.refresh_pattern(row["pattern_key"])


RANDOM_STATUSES = ("open", "open", "verified", "disputed", "fixed")
LONELY = pattern_key("Lonely pattern in two repositories")


async def random_registry(rng: random.Random, reporter: Account) -> None:
    repos = [await factories.create_repository() for _ in range(6)]
    titles = [f"Random pattern {n} in handler" for n in range(14)]
    now = db.utcnow()
    for _ in range(70):
        age = timedelta(hours=rng.choice((1, 100, 400, 1500, 5000, 9000)))
        await factories.create_instance(
            rng.choice(repos),
            reporter,
            rng.choice(titles),
            status=rng.choice(RANDOM_STATUSES),
            visibility=rng.choice(("public", "public", "public", "restricted")),
            updated_at=now - age,
            inserted_at=now - age - timedelta(hours=rng.randrange(1, 500)),
        )
    await set_listing(repos[0].id, "quarantined")
    for repo in repos[1:3]:  # a pattern of two repositories only, one of which shuffle_source delists
        await factories.create_instance(repo, reporter, "Lonely pattern in two repositories")


async def set_listing(repository_id: int, listing: str) -> None:
    async with db.transaction() as session:
        await session.execute(
            text("UPDATE repositories SET listing_status = :l WHERE id = :id"), {"l": listing, "id": repository_id}
        )
