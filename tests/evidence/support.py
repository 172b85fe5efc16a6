"""A pending report stored as the gate stores one when the forge cannot decide (docs/domain.md "Evidence at the
commit"): unpublished, every occurrence pending and unlinked, nothing settled."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text

from app.accounts.models import Account
from app.kernel import db
from app.registry.models import Repository
from tests import factories

_HOLD = text(
    "UPDATE scans SET published_at = NULL, evidence_next_at = now() + interval '30 seconds', run_id = :run_id, "
    "findings_count = :n WHERE id = :id RETURNING inserted_at"
)
_FINDINGS = text("""
INSERT INTO scan_findings (scan_id, position, file_path, line_start, line_end, severity, title, description,
                           evidence_state, published_at)
SELECT :scan_id, n.ord - 1, n.path, 1, 3, 'high', n.title, 'described', 'pending', NULL
FROM unnest(CAST(:paths AS text[]), CAST(:titles AS text[])) WITH ORDINALITY AS n(path, title, ord)
ORDER BY n.ord
RETURNING id, public_id
""")


@dataclass(frozen=True)
class Pending:
    scan_id: int
    commit_sha: str
    inserted_at: datetime
    findings: list[tuple[int, str]]  # (id, public id) in position order


async def pending_report(
    repo: Repository,
    author: Account,
    findings: list[tuple[str, str]],
    *,
    run_id: str | None = None,
    commit_sha: str | None = None,
) -> Pending:
    """A report of `findings` ((path, title) each, lines 1-3) whose evidence is pending."""
    scan = await factories.create_scan(repo, author, commit_sha=commit_sha)
    async with db.transaction() as session:
        params = {"id": scan.id, "run_id": run_id, "n": len(findings)}
        inserted_at = (await session.execute(_HOLD, params)).scalar_one()
        rows = await session.execute(
            _FINDINGS,
            {"scan_id": scan.id, "paths": [p for p, _t in findings], "titles": [t for _p, t in findings]},
        )
        stored = sorted((int(r.id), str(r.public_id)) for r in rows)
    return Pending(scan.id, scan.commit_sha, inserted_at, stored)
