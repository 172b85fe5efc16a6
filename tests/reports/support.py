"""Report bodies, reviewers and check bodies, and row counts shared by the report, check, quorum and metric tests."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from app.accounts.models import Account
from app.kernel import db
from app.reports.checks import record_check
from app.reports.finding_memory import legacy_fingerprint
from tests import factories

COMMIT = "a" * 40
NOTES = "Reproduced with the proof of concept."
_DROP = object()
DROP: Any = _DROP  # marks a key to leave out of a body


def finding(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "file": "lib/auth.ex",
        "line_start": 10,
        "line_end": 12,
        "severity": "high",
        "title": "SQL injection in login",
        "description": "User input is concatenated into the SQL string.",
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not _DROP}


def report_body(findings: list[dict[str, Any]] | None = None, **overrides: Any) -> dict[str, Any]:
    """A valid report request body; overrides replace envelope keys (DROP removes one)."""
    base: dict[str, Any] = {
        "commit_sha": COMMIT,
        "model": "gpt-test",
        "prompt_version": "review/v1",
        "document": {"tarakan_scan_format": 1, "findings": [finding()] if findings is None else findings},
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not _DROP}


async def reviewer(**overrides: Any) -> Account:
    """An account whose human checks count toward quorum (active, reviewer tier) unless overridden."""
    return await factories.create_account(**{"state": "active", "trust_tier": "reviewer", **overrides})


def check_body(**overrides: Any) -> dict[str, Any]:
    """A valid check request body: a human confirmation at COMMIT."""
    return {"commit_sha": COMMIT, "verdict": "confirmed", "provenance": "human", "notes": NOTES, **overrides}


async def reach_quorum(canonical_public_id: str, verdict: str, **reviewer_overrides: Any) -> None:
    """Two qualified human checks with one verdict at COMMIT: enough for verified or fixed (docs/domain.md §1.5)."""
    for _ in range(2):
        await record_check(await reviewer(**reviewer_overrides), canonical_public_id, check_body(verdict=verdict))


async def row_counts() -> dict[str, int]:
    tables = ("scans", "scan_findings", "canonical_findings", "canonical_finding_checks", "infestation_dirty_keys")
    async with db.read_session(replica=False) as session:
        return {t: int((await session.execute(text(f"SELECT count(*) FROM {t}"))).scalar_one()) for t in tables}


async def insert_v1_finding(
    repository_id: int,
    scan_id: int,
    commit_sha: str,
    title: str,
    *,
    path: str,
    line_start: int,
    line_end: int | None,
    key: str,
    age_days: int = 0,
) -> int:
    """A canonical finding stored before fingerprint v2 (its v1 fingerprint and the given pattern key) with one
    occurrence in `scan_id`, written straight in SQL as old data would be. Returns the canonical's id."""
    legacy = legacy_fingerprint(path, line_start, line_end or line_start, title)
    stamp = {"age": f"{age_days} days"}
    async with db.transaction() as session:
        canonical_id = int(
            (
                await session.execute(
                    text(
                        "INSERT INTO canonical_findings (repository_id, fingerprint, pattern_key, file_path,"
                        " line_start, line_end, severity, title, description, first_seen_commit_sha,"
                        " last_seen_commit_sha, detections_count, inserted_at, updated_at)"
                        " VALUES (:r, :fp, :pk, :path, :ls, :le, 'high', :t, 'old', :sha, :sha, 1,"
                        " now() - CAST(:age AS interval), now() - CAST(:age AS interval)) RETURNING id"
                    ),
                    {
                        "r": repository_id,
                        "fp": legacy,
                        "pk": key,
                        "path": path,
                        "ls": line_start,
                        "le": line_end,
                        "t": title,
                        "sha": commit_sha,
                        **stamp,
                    },
                )
            ).scalar_one()
        )
        await session.execute(
            text(
                "INSERT INTO scan_findings (scan_id, file_path, line_start, line_end, severity, title, description,"
                " canonical_finding_id, fingerprint) VALUES (:s, :path, :ls, :le, 'high', :t, 'old', :c, :fp)"
            ),
            {"s": scan_id, "path": path, "ls": line_start, "le": line_end, "t": title, "c": canonical_id, "fp": legacy},
        )
    return canonical_id
