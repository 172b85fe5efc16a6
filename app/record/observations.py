"""The observation ledger as the public record shows it (written by app/evidence/observe.py): a canonical's
`observations`, newest first, on its occurrences' pages and twins, the repository twin, the maintain page and the
export (docs/domain.md "Observations")."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Annotated, Any, NamedTuple

from msgspec import Meta
from sqlalchemy import text

from app.kernel import db
from app.kernel.answers import Answer, Timestamp, enum
from app.kernel.sql import statement
from app.record.models import OBSERVATION_REASONS
from app.record.public import public_occurrence

STATES = ("present", "moved", "absent")
MAINTAIN_ROWS = 200


class Observation(Answer):
    """One look at the default branch's head: is the finding's code still there?"""

    commit: Annotated[str, Meta(description="the default branch's head that was read")]
    branch: str
    state: Annotated[str, enum(STATES, "present: at the same lines; moved: elsewhere in the file; absent")]
    line_start: Annotated[int | None, Meta(description="where the lines are now (present, moved)")]
    line_end: int | None
    reason: Annotated[str | None, enum(OBSERVATION_REASONS, "absent only: why")]
    at: Timestamp


class ObservedFinding(NamedTuple):
    """A maintain page row: an observed finding, by its newest publishable occurrence, and its newest look in words."""

    public_id: uuid.UUID
    title: str
    file_path: str
    words: str


def observation(entry: dict[str, Any]) -> Observation:
    """One ledger entry as stored (JSON written by app/evidence/observe.py; rows before `branch` lack it)."""
    return Observation(
        commit=str(entry["commit"]),
        branch=str(entry.get("branch") or ""),
        state=str(entry["state"]),
        line_start=entry.get("line_start"),
        line_end=entry.get("line_end"),
        reason=entry.get("reason"),
        at=str(entry["at"]),
    )


def words(entry: Observation) -> str:
    """The observation in words: "not in the code at abc1234 on main, 3 Dec: the lines changed"."""
    at = datetime.fromisoformat(entry.at)
    where = f"{entry.commit[:7]} on {entry.branch or 'the default branch'}, {at.day} {at:%b}"
    span = f"lines {entry.line_start}–{entry.line_end}" if entry.line_start else None
    if entry.state == "moved":
        return f"moved to {span} at {where}"
    if entry.state == "present":
        return f"in the code at {where}" + (f" ({span})" if span else " (its file)")
    why = "the file is gone" if entry.reason == "file_missing" else "the lines changed"
    return f"not in the code at {where}: {why}"


def stored_entries(value: Any) -> list[dict[str, Any]]:
    """A ledger column as its stored JSON entries (the driver hands JSONB over as text or decoded)."""
    raw = json.loads(value) if isinstance(value, str) else value
    return [e for e in raw if isinstance(e, dict)] if isinstance(raw, list) else []


def _entries(value: Any) -> list[Observation]:
    return [observation(e) for e in stored_entries(value)]


def ledger_of(stored: Any) -> list[Observation]:
    """A canonical's ledger from its `observations` column read with other columns (None: no canonical)."""
    return _entries(stored)


_LEDGER = text("SELECT observations FROM canonical_findings WHERE id = :id")
_LATEST = text(
    "SELECT f.public_id, c.observations -> 0 AS latest FROM scan_findings f "
    "JOIN canonical_findings c ON c.id = f.canonical_finding_id "
    "WHERE f.public_id = ANY(CAST(:ids AS uuid[])) AND jsonb_array_length(c.observations) > 0"
)
# the maintain page: each observed finding of the repository, linked by its newest publishable occurrence
_REPOSITORY = statement(
    """
SELECT o.public_id, o.title, o.file_path, c.observations -> 0 AS latest
FROM canonical_findings c
JOIN LATERAL (
  SELECT f.public_id, f.title, f.file_path
  FROM scan_findings f JOIN scans s ON s.id = f.scan_id JOIN repositories r ON r.id = s.repository_id
  WHERE f.canonical_finding_id = c.id AND {public}
  ORDER BY s.inserted_at DESC, f.id DESC LIMIT 1
) o ON TRUE
WHERE c.repository_id = :repository_id AND jsonb_array_length(c.observations) > 0
ORDER BY c.id
LIMIT :limit
""",
    public=public_occurrence(),
)


async def ledger(canonical_id: int | None) -> list[Observation]:
    """The canonical's ledger, newest first (empty when never observed)."""
    if canonical_id is None:
        return []
    async with db.reader() as read:
        found = await read.rows(_LEDGER, {"id": canonical_id})
    return _entries(found[0][0] if found else None)


async def latest_by_occurrences(read: db.Reader, public_ids: Iterable[uuid.UUID | str]) -> dict[str, Observation]:
    """The newest observation of each occurrence's canonical, by occurrence public id (str), on the page's open
    read."""
    ids = sorted({str(p) for p in public_ids})
    if not ids:
        return {}
    rows = await read.rows(_LATEST, {"ids": ids})
    return {str(r.public_id): e[0] for r in rows if (e := _entries([r.latest]))}


async def repository_latest(repository_id: int) -> list[ObservedFinding]:
    """The maintain page's rows: each observed finding and its newest observation in words."""
    async with db.read_session(replica=False) as session:
        rows = (await session.execute(_REPOSITORY, {"repository_id": repository_id, "limit": MAINTAIN_ROWS})).all()
    return [
        ObservedFinding(r.public_id, r.title, r.file_path, words(entries[0]))
        for r in rows
        if (entries := _entries([r.latest]))
    ]
