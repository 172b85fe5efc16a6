"""The change feed's read side: entries in commit order, rendered from current visibility (docs/domain.md §13
"Change feed")."""

from __future__ import annotations

from typing import Any

from app.kernel import db
from app.kernel.paging import Page
from app.kernel.sql import outer, statement
from app.record import changes
from app.record.models import FINDING_OBSERVED, FINDING_STATEMENT, FINDING_WITHDRAWN, LISTED_KIND, PUBLISHED, STATUS
from app.record.public import listed_repository, public_occurrence

DEFAULT_LIMIT = 100
MAX_LIMIT = 1_000

# One page, then per entry a few index probes: LATERAL ... LIMIT 1 keeps each visibility check a per-row probe (an
# EXISTS here may be planned as one hash over every public occurrence, which at 10^6 rows is a full scan per page).
_PAGE = statement(
    """
SELECT ch.seq, ch.at, ch.kind, ch.finding, ch.canonical, ch.repository_key, ch.pattern_key, ch.status, ch.reason,
       ch.commit_sha,
       CASE WHEN {listed} THEN r.host || '/' || r.owner || '/' || r.name END AS slug,
       fp.found IS NOT NULL AS finding_public,
       cp.found IS NOT NULL AS canonical_public,
       st.status AS statement_status, st.justification AS statement_justification
FROM (SELECT * FROM changes WHERE seq >= :start ORDER BY seq LIMIT :limit) ch
LEFT JOIN repositories r ON r.id = ch.repository_id
LEFT JOIN finding_statements st ON st.id = ch.statement_id AND st.visibility = 'shown'
LEFT JOIN LATERAL (
  SELECT 1 AS found FROM scan_findings f JOIN scans s ON s.id = f.scan_id JOIN repositories r ON r.id = s.repository_id
  WHERE f.public_id = ch.finding AND {public} LIMIT 1
) fp ON TRUE
LEFT JOIN LATERAL (
  SELECT 1 AS found FROM canonical_findings c JOIN repositories r ON r.id = c.repository_id
  JOIN scan_findings f ON f.canonical_finding_id = c.id JOIN scans s ON s.id = f.scan_id
  WHERE {with_status} AND c.public_id = ch.canonical AND {public}
  LIMIT 1
) cp ON TRUE
ORDER BY ch.seq
""",
    listed=listed_repository(),
    public=public_occurrence(),
    with_status=outer("ch.kind").in_((STATUS, FINDING_STATEMENT, FINDING_OBSERVED)),
)


def render(row: Any) -> dict[str, Any]:
    """One entry as served: `seq`, `at`, `kind`, then the ids the kind carries that current visibility allows."""
    entry: dict[str, Any] = {"seq": row.seq, "at": row.at, "kind": row.kind}
    if row.kind == PUBLISHED:
        entry["finding"] = row.finding
        if row.finding_public:
            entry |= {
                "canonical": row.canonical,
                "repository": row.slug,
                "repository_id": row.repository_key,
                "pattern_key": row.pattern_key,
            }
    elif row.kind == STATUS:
        entry["canonical"] = row.canonical
        if row.canonical_public:
            entry["status"] = row.status
    elif row.kind == FINDING_STATEMENT:
        # the finding's current statement when the entry was written (none: a hide left none); shown only while that
        # statement is not hidden and the finding is public (docs/domain.md "Maintainers")
        entry["canonical"] = row.canonical
        if row.canonical_public and row.statement_status is not None:
            entry |= {"status": row.statement_status, "justification": row.statement_justification}
        if row.reason is not None:  # a moderator's hide
            entry["reason"] = row.reason
    elif row.kind == FINDING_OBSERVED:  # the canonical's code seen in another state (app/evidence/observe.py)
        entry["canonical"] = row.canonical
        if row.canonical_public:
            entry |= {"state": row.status, "commit": row.commit_sha}
            if row.reason is not None:
                entry["reason"] = row.reason
    elif row.kind == FINDING_WITHDRAWN:
        entry |= {"finding": row.finding, "reason": row.reason}
    elif row.kind == LISTED_KIND:
        if row.slug is not None:
            entry["repository"] = row.slug
        entry["repository_id"] = row.repository_key
    else:  # repository.withdrawn: the opaque id only
        entry["repository_id"] = row.repository_key
    return entry


async def changes_page(*, cursor: str | None, limit: int) -> Page[dict[str, Any]]:
    """Up to `limit` entries from `cursor` (None: the start), oldest first; `next_cursor` is always set (a client
    at the end polls from it). Seq order is commit order, so reading `seq >= cursor` never skips a late commit."""
    start = changes.next_seq_of(cursor)
    async with db.read_session() as session:
        rows = (await session.execute(_PAGE, {"start": start, "limit": limit})).all()
    entries = [render(row) for row in rows]
    next_seq = int(rows[-1].seq) + 1 if rows else start
    return {"entries": entries, "next_cursor": changes.cursor_at(next_seq)}
