"""The maintainer is told first (docs/domain.md "Coordinated disclosure"): a repository's embargoed findings in full
for its verified maintainers (the maintain page, `GET .../embargoed`, the private `finding.embargoed` delivery), the
maintainer's first view and acknowledgement of a clock, and the repository's own window.

A finding is told once its canonical is under a running clock and it has an occurrence the embargo holds (not one
held for low signal, not one whose evidence is pending or refused) in a public report. The full finding carries the
finding twin's fields (`FindingDetail`, built once by app/reports/serializers.py `finding_detail`)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import text

from app.kernel import db
from app.kernel.actors import ACTING_STATES
from app.kernel.answers import as_json, iso
from app.kernel.audit import record_audit
from app.kernel.errors import Forbidden, NotFound, ValidationError
from app.kernel.paging import Page, decode_id_cursor, encode_id_cursor, keyset_page
from app.kernel.sql import Fragment, statement
from app.maintainers.access import acting_account, listed_repository, maintains, slug
from app.maintainers.types import EmbargoedEntry, EmbargoedFinding
from app.registry.models import Repository
from app.reports.embargo import DISCLOSURE_FRAGMENT, DisclosureAnswer, disclosure_answer
from app.reports.serializers import finding_detail

KIND = "finding.embargoed"  # the private entry kind: never a change-feed entry
WINDOW_ACTION = "repository.disclosure_window"  # the audit log's action for a window change
MAX_WINDOW_DAYS = 90
PAGE_DEFAULT = 50
PAGE_MAX = 100

# the occurrence `f` (of scan `s`) the embargo holds and a maintainer may be told of (see the module's docstring)
TOLD = Fragment(
    "f.held_reason = 'embargo' AND f.evidence_state IN ('confirmed', 'unchecked')"
    " AND s.visibility = 'public' AND s.published_at IS NOT NULL"
)
_FINDING_COLUMNS = Fragment(
    """f.id, f.public_id, f.title, f.severity, f.file_path, f.line_start, f.line_end, f.description,
       f.disposition, s.commit_sha, s.inserted_at AS reported_at, r.host, r.owner, r.name,
       c.id AS canonical_id, c.public_id AS canonical_public_id, c.status, c.pattern_key,
       c.confirmations_count, c.disputes_count"""
)
_COLUMNS = DISCLOSURE_FRAGMENT

# a repository's running clocks with their newest told occurrence, by canonical id after the cursor's
_EMBARGOED = statement(
    """
SELECT DISTINCT ON (d.canonical_finding_id) {finding}, {disclosure}
FROM disclosures d
JOIN canonical_findings c ON c.id = d.canonical_finding_id
JOIN scan_findings f ON f.canonical_finding_id = d.canonical_finding_id
JOIN scans s ON s.id = f.scan_id
JOIN repositories r ON r.id = s.repository_id
WHERE d.repository_id = :repository_id AND d.state = 'embargoed' AND d.canonical_finding_id > :after AND {told}
ORDER BY d.canonical_finding_id, s.inserted_at DESC, f.id DESC
LIMIT :fetch
""",
    finding=_FINDING_COLUMNS,
    disclosure=_COLUMNS,
    told=TOLD,
)

# one canonical's clock and newest told occurrence (or, its clock ended meanwhile, its newest public one): what a
# `finding.embargoed` delivery carries when it is sent, only while the webhook's owner still maintains the
# repository in good standing (a maintainership that ended after the delivery was made is told nothing)
_ONE = statement(
    """
SELECT {finding}, {disclosure}
FROM disclosures d
JOIN canonical_findings c ON c.id = d.canonical_finding_id
JOIN scan_findings f ON f.canonical_finding_id = d.canonical_finding_id
JOIN scans s ON s.id = f.scan_id
JOIN repositories r ON r.id = s.repository_id
WHERE d.canonical_finding_id = :canonical_id AND r.listing_status = 'listed'
  AND (({told}) OR (f.published_at IS NOT NULL AND s.visibility = 'public' AND s.published_at IS NOT NULL))
  AND EXISTS (
    SELECT 1 FROM webhooks w
    JOIN repository_maintainers m
      ON m.repository_id = w.repository_id AND m.account_id = w.owner_id AND m.ended_at IS NULL
    JOIN accounts a ON a.id = w.owner_id AND a.state = ANY(CAST(:acting AS text[]))
    WHERE w.id = :webhook_id AND w.repository_id = d.repository_id)
ORDER BY s.inserted_at DESC, f.id DESC
LIMIT 1
""",
    finding=_FINDING_COLUMNS,
    disclosure=_COLUMNS,
    told=TOLD,
)

# the maintainer's first view of these clocks (their delivery's 2xx may have come first)
NOTIFY = text(
    """
UPDATE disclosures SET notified_at = now(), updated_at = now()
WHERE canonical_finding_id = ANY(CAST(:ids AS bigint[])) AND notified_at IS NULL
RETURNING canonical_finding_id, notified_at
"""
)
# a finding's public id (an occurrence's, or its canonical's) names the canonical's clock, locked
_CLOCK_OF = text(
    """
SELECT d.canonical_finding_id, d.repository_id, r.listing_status
FROM disclosures d
JOIN repositories r ON r.id = d.repository_id
WHERE d.canonical_finding_id = coalesce(
  (SELECT f.canonical_finding_id FROM scan_findings f WHERE f.public_id = :public_id),
  (SELECT c.id FROM canonical_findings c WHERE c.public_id = :public_id))
FOR NO KEY UPDATE OF d
"""
)
_ACKNOWLEDGE = statement(
    """
UPDATE disclosures d
SET acknowledged_at = coalesce(d.acknowledged_at, now()), notified_at = coalesce(d.notified_at, now()),
    updated_at = now()
WHERE d.canonical_finding_id = :canonical_id
RETURNING {disclosure}
""",
    disclosure=_COLUMNS,
)


def full_finding(row: Mapping[str, Any]) -> EmbargoedFinding:
    """The finding as its twin will show it once public, with its clock."""
    return EmbargoedFinding(
        finding=finding_detail(row),
        disclosure=disclosure_answer(row),
    )


async def embargoed_page(
    account_id: int, host: str, owner: str, name: str, *, cursor: str | None, limit: int
) -> tuple[Repository, Page[EmbargoedFinding]]:
    """A verified maintainer's view of the listed repository's embargoed findings, in full: 404 for an unknown
    repository, 403 for anyone else. The view tells them: each clock shown gets `notified_at` where it has none."""
    after = decode_id_cursor(cursor) if cursor is not None else 0  # InvalidCursor (400) before any read
    async with db.transaction() as session:
        await acting_account(session, account_id)
        repository = await listed_repository(session, host, owner, name)
        if not await maintains(session, repository.id, account_id):
            raise Forbidden(
                {"repository": ["only a verified maintainer of this repository sees its embargoed findings"]}
            )
        params = {"repository_id": repository.id, "after": after, "fetch": limit + 1}
        rows = list((await session.execute(_EMBARGOED, params)).mappings())
        page = keyset_page(rows, limit, lambda row: encode_id_cursor(int(row["canonical_id"])))
        shown = [int(row["canonical_id"]) for row in page["entries"]]
        told: dict[int, datetime] = {}
        if shown:
            told = {int(cid): at for cid, at in await session.execute(NOTIFY, {"ids": shown})}
        # the answer says when this view told them (the rows were read before the update)
        items = [
            full_finding(
                {**row, "disclosure_notified_at": told.get(row["canonical_id"], row["disclosure_notified_at"])}
            )
            for row in rows
        ]
        session.expunge(repository)
    return repository, {"entries": items, "next_cursor": page["next_cursor"]}


async def webhook_entry(canonical_id: int, webhook_id: int) -> dict[str, Any] | None:
    """The `finding.embargoed` entry of a canonical for one webhook, as sent (JSON values), or None when nothing of
    it may be shown there any more (its repository unlisted, its occurrences withdrawn, the webhook's owner no
    longer a maintainer in good standing): the delivery is then dropped."""
    params = {"canonical_id": canonical_id, "webhook_id": webhook_id, "acting": list(ACTING_STATES)}
    async with db.read_session(replica=False) as session:
        row = (await session.execute(_ONE, params)).mappings().first()
    if row is None:
        return None
    told = full_finding(dict(row))
    at = iso(row["disclosure_reported_at"]) or ""
    return as_json(EmbargoedEntry(kind=KIND, at=at, finding=told.finding, disclosure=told.disclosure))


async def acknowledge(account_id: int, raw_id: str) -> DisclosureAnswer:
    """A verified maintainer of the finding's repository acknowledges its clock (once: a second call answers as it
    is; it tells them too, when nothing had). 404 for a finding without a clock, 403 for anyone else."""
    try:
        public_id = uuid.UUID(raw_id)
    except ValueError:
        raise NotFound({"finding": ["not found"]}) from None
    async with db.transaction() as session:
        await acting_account(session, account_id)
        clock = (await session.execute(_CLOCK_OF, {"public_id": public_id})).mappings().first()
        if clock is None or clock["listing_status"] != "listed":
            raise NotFound({"finding": ["no coordinated disclosure of this finding"]})
        if not await maintains(session, int(clock["repository_id"]), account_id):
            raise Forbidden({"finding": ["only a verified maintainer of its repository can acknowledge its clock"]})
        row = (await session.execute(_ACKNOWLEDGE, {"canonical_id": clock["canonical_finding_id"]})).mappings().one()
        return disclosure_answer(dict(row))


async def set_window(account_id: int, host: str, owner: str, name: str, days: int) -> tuple[Repository, int]:
    """A verified maintainer sets the listed repository's disclosure window (0-90 days; 0: none), for findings
    reported from then on; audited. 404 for an unknown repository, 403 for anyone else, 422 naming `days`."""
    if not 0 <= days <= MAX_WINDOW_DAYS:
        raise ValidationError({"days": [f"must be an integer from 0 to {MAX_WINDOW_DAYS}"]})
    async with db.transaction() as session:
        account = await acting_account(session, account_id)
        repository = await listed_repository(session, host, owner, name, lock=True)
        if not await maintains(session, repository.id, account.id):
            raise Forbidden({"repository": ["only a verified maintainer of this repository can set its window"]})
        before = repository.disclosure_days
        if before != days:
            repository.disclosure_days = days
            repository.updated_at = db.utcnow()
            await session.flush()
            await record_audit(
                session,
                actor_id=account.id,
                action=WINDOW_ACTION,
                subject_type="repository",
                subject_id=slug(repository),
                before={"disclosure_days": before},
                after={"disclosure_days": days},
                reason=None,
                notes=None,
            )
        session.expunge(repository)
        return repository, days
