"""The burden a repository's maintainers bore (docs/domain.md "Earned trust"): how many findings about it were
decided, and how many of those were disputed or refused at their commit. Counts about a repository, not a person."""

from __future__ import annotations

from sqlalchemy import text

from app.kernel import db
from app.site.types import Burden

_BURDEN = text("""
SELECT count(*) AS decided,
       count(*) FILTER (WHERE o.outcome = 'disputed') AS disputed,
       count(*) FILTER (WHERE o.outcome = 'refused') AS refused
FROM finding_outcomes o
WHERE o.canonical_finding_id IN (SELECT id FROM canonical_findings WHERE repository_id = :id)
   OR o.scan_finding_id IN (
        SELECT f.id FROM scan_findings f JOIN scans s ON s.id = f.scan_id WHERE s.repository_id = :id)
   OR o.refusal_id IN (SELECT id FROM report_refusals WHERE repository_id = :id)
""")


async def burden_of(repository_id: int) -> Burden:
    async with db.reader() as read:
        (row,) = await read.rows(_BURDEN, {"id": repository_id})
    return Burden(decided=int(row.decided), disputed=int(row.disputed), refused=int(row.refused))
