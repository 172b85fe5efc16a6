"""The review queue (docs/domain.md "Earned trust"): findings held for review because their reporter's signal is
below the floor, oldest first, for qualified reviewers (their counted check of any verdict releases one) and
moderators (who also see the reporter's signal, and may release an account's whole queue)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.kernel.paging import decode_id_cursor, encode_id_cursor

PAGE = 50

# held occurrences of public reports on listed repositories (reviewers' checks follow visibility and listing, not
# `publishable`), after the cursor's id
_HELD = text("""
SELECT f.id, f.public_id, c.public_id AS canonical_public_id, f.title, f.severity, f.file_path, f.line_start,
       f.line_end, s.commit_sha, f.inserted_at, r.host, r.owner, r.name, a.handle AS reporter,
       g.precision, g.decided, g.gated
FROM scan_findings f
JOIN scans s ON s.id = f.scan_id
JOIN repositories r ON r.id = s.repository_id
JOIN canonical_findings c ON c.id = f.canonical_finding_id
JOIN accounts a ON a.id = s.submitted_by_id
LEFT JOIN account_signals g ON g.account_id = a.id
WHERE f.held_reason = 'low_signal' AND f.published_at IS NULL AND s.visibility = 'public'
  AND r.listing_status = 'listed' AND f.id > :after
ORDER BY f.id
LIMIT :limit
""")


@dataclass(frozen=True)
class Held:
    id: int
    public_id: str
    canonical_public_id: str
    title: str
    severity: str
    file_path: str
    line_start: int | None
    line_end: int | None
    commit_sha: str
    reported_at: datetime
    repository: str  # HOST/OWNER/NAME
    reporter: str
    precision: float
    decided: int
    gated: bool  # the reporter's gate now (a pin may have opened it since)


async def held_page(session: AsyncSession, cursor: str | None, limit: int = PAGE) -> tuple[list[Held], str | None]:
    """One page of the queue and the next page's cursor (InvalidCursor for a malformed one)."""
    after = 0 if cursor is None else decode_id_cursor(cursor)
    rows = (await session.execute(_HELD, {"after": after, "limit": limit + 1})).all()
    items = [
        Held(
            int(r.id),
            str(r.public_id),
            str(r.canonical_public_id),
            r.title,
            r.severity,
            r.file_path,
            r.line_start,
            r.line_end,
            r.commit_sha,
            r.inserted_at,
            f"{r.host}/{r.owner}/{r.name}",
            r.reporter,
            0.5 if r.precision is None else float(r.precision),
            int(r.decided or 0),
            bool(r.gated),
        )
        for r in rows[:limit]
    ]
    return items, encode_id_cursor(items[-1].id) if len(rows) > limit else None
