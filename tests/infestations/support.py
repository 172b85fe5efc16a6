"""A small registry of known patterns across windows, shared by the rollup, legacy, shadow and cutover tests."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text

from app.infestations import projection
from app.kernel import db
from app.registry.models import Repository
from app.reports.finding_memory import pattern_key
from tests import factories

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
    ]
    async with db.transaction() as session:
        for statement in statements:
            await session.execute(text(statement), interval)

