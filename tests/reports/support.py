"""Report bodies and row counts shared by the report, check and quorum tests."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from app.kernel import db

COMMIT = "a" * 40
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


async def row_counts() -> dict[str, int]:
    tables = ("scans", "scan_findings", "canonical_findings", "canonical_finding_checks", "infestation_dirty_keys")
    async with db.read_session(replica=False) as session:
        return {t: int((await session.execute(text(f"SELECT count(*) FROM {t}"))).scalar_one()) for t in tables}

