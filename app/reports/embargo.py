"""Coordinated disclosure's two writes on the report path (docs/domain.md "Coordinated disclosure"): a new report's
occurrences put under their canonical's clock as they are published, and the clock's end publishing them. The
clock belongs to the canonical finding (one `disclosures` row): a duplicate report never resets or shortens it, and
a finding that was already public is never embargoed.

An embargoed occurrence is stored linked but unpublished (`held_reason = 'embargo'`, `published_at` NULL), like a
held one (app/reports/held.py): nothing public moves until `publish_embargoed`, which releases it through the same
settle path as a new report's (feed diff, dirty keys, metrics, webhooks, purge)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated, Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.kernel.answers import Answer, Timestamp, enum, iso
from app.kernel.sql import Fragment
from app.record.outbox import ring_webhooks_after_commit
from app.reports.held import EMBARGO, release_occurrences
from app.reports.models import PUBLISHED_BECAUSE
from app.reports.validation import DISCLOSURE_MAX_DAYS, DISCLOSURE_MIN_DAYS

MAX_DAYS = DISCLOSURE_MAX_DAYS  # the longest embargo, whatever the two windows ask
REPORTER_MIN_DAYS = DISCLOSURE_MIN_DAYS  # a reporter's request: 7 <= days <= 90 (`disclosure.days`)

# One statement after the report's occurrences are linked (and before its settle): the window is the larger of the
# reporter's and the repository's, at most 90 days; a canonical with a published occurrence in a public report other
# than this one, or whose clock already ended, opens none; every occurrence of this report whose canonical is (now)
# embargoed is held. A held-for-review occurrence (low signal) opens the clock too but stays held for its own reason.
# The repository row is locked by the caller: no concurrent report of it opens a clock meanwhile.
_EMBARGO = text("""
WITH win AS (
  SELECT least(:max_days, greatest(coalesce(CAST(:reporter_days AS integer), 0), r.disclosure_days)) AS days,
         r.disclosure_days AS repository_days
  FROM repositories r WHERE r.id = :repository_id
), mine AS (
  SELECT f.id, f.canonical_finding_id AS cid, f.published_at IS NOT NULL AS published FROM scan_findings f
  WHERE f.scan_id = :scan_id AND f.canonical_finding_id IS NOT NULL
    AND (f.published_at IS NOT NULL OR f.held_reason = 'low_signal')
), opened AS (
  INSERT INTO disclosures (canonical_finding_id, repository_id, reported_at, deadline, reporter_days, repository_days)
  SELECT DISTINCT m.cid, :repository_id, now(), now() + make_interval(days => w.days), CAST(:reporter_days AS integer),
         w.repository_days
  FROM mine m CROSS JOIN win w
  WHERE w.days > 0 AND NOT EXISTS (
    SELECT 1 FROM scan_findings o JOIN scans os ON os.id = o.scan_id
    WHERE o.canonical_finding_id = m.cid AND o.scan_id <> :scan_id AND o.published_at IS NOT NULL
      AND os.visibility = 'public' AND os.published_at IS NOT NULL)
  ON CONFLICT (canonical_finding_id) DO NOTHING
  RETURNING canonical_finding_id
), held AS (
  UPDATE scan_findings f SET published_at = NULL, held_reason = 'embargo'
  FROM mine m
  WHERE f.id = m.id AND m.published
    AND (m.cid IN (SELECT canonical_finding_id FROM opened)
         OR EXISTS (SELECT 1 FROM disclosures d WHERE d.canonical_finding_id = m.cid AND d.state = 'embargoed'))
  RETURNING f.canonical_finding_id
)
SELECT (SELECT count(*) FROM opened) AS opened,
       (SELECT coalesce(array_agg(DISTINCT canonical_finding_id), '{}') FROM held) AS held
""")


async def embargo_new_occurrences(
    session: AsyncSession, *, scan_id: int, repository_id: int, reporter_days: int | None
) -> frozenset[int]:
    """Put report `scan_id`'s just-linked occurrences under their canonicals' clocks (opening one where a window
    applies): the canonicals whose occurrences of this report are now held by an embargo (their findings answer
    `held: embargo`; their keys are not the settle's to mark). The caller settles the report afterwards."""
    row = (
        await session.execute(
            _EMBARGO,
            {
                "scan_id": scan_id,
                "repository_id": repository_id,
                "reporter_days": reporter_days,
                "max_days": MAX_DAYS,
            },
        )
    ).one()
    if row.held:  # the repository's maintainers' webhooks are told at once (app/maintainers/embargoed.py's sweep)
        ring_webhooks_after_commit()
    return frozenset(int(cid) for cid in row.held)


# why a clock ended: the deadline passed (the worker's clock), or a person ended it (each audited by its caller)
# A deadline a maintainer's `fixed` statement set (the last change of the clock: days <= 0, reason fixed) ends as
# `fixed` when it passes, not `deadline` (app/maintainers/statement_clock.py)
_END = text("""
UPDATE disclosures SET state = 'published', published_at = now(), updated_at = now(),
  published_because = CASE
    WHEN CAST(:because AS text) = 'deadline' AND extensions -> -1 ->> 'reason' = 'fixed'
         AND CAST(extensions -> -1 ->> 'days' AS integer) <= 0 THEN 'fixed'
    ELSE CAST(:because AS text) END
WHERE canonical_finding_id = ANY(CAST(:ids AS bigint[])) AND state = 'embargoed'
RETURNING canonical_finding_id
""")


# a maintainer's statement on an embargoed finding announced nothing (app/maintainers/statements.py): its current one
# is announced once the finding is published, after its `finding.published` entries
_ANNOUNCE_STATEMENTS = text("""
INSERT INTO changes (kind, canonical, repository_id, repository_key, statement_id, status)
SELECT 'finding.statement', c.public_id, c.repository_id,
       (SELECT pr.opaque_id FROM published_repositories pr WHERE pr.repository_id = c.repository_id), st.id, st.status
FROM canonical_findings c
JOIN LATERAL (
  SELECT s.id, s.status FROM finding_statements s WHERE s.canonical_finding_id = c.id AND s.visibility = 'shown'
  ORDER BY s.inserted_at DESC, s.id DESC LIMIT 1
) st ON TRUE
WHERE c.id = ANY(CAST(:ids AS bigint[]))
ORDER BY c.id
""")


async def publish_embargoed(session: AsyncSession, canonical_ids: Iterable[int], because: str) -> list[int]:
    """End these canonicals' embargoes (`because`: deadline, fixed, maintainer, moderator, reporter) and publish
    their embargoed occurrences in this transaction: the canonical ids whose clock ended now (already published
    ones are skipped)."""
    ended = [
        int(r.canonical_finding_id)
        for r in await session.execute(_END, {"ids": sorted(set(canonical_ids)), "because": because})
    ]
    if ended:
        await release_occurrences(session, EMBARGO, canonicals=ended)
        await session.execute(_ANNOUNCE_STATEMENTS, {"ids": ended})
    return ended


# ---- the `disclosure` object every machine-readable surface carries (docs/domain.md "Coordinated disclosure") ----

IMMEDIATE = "immediate"  # a finding with no `disclosures` row: public as soon as it was publishable
EXTENDED_BY = ("maintainer", "moderator")

# a canonical's clock, for any statement that joins `disclosures d` (never the reporter: the row does not name them):
# compose `DISCLOSURE_FRAGMENT` with `app.kernel.sql.statement(..., columns=DISCLOSURE_FRAGMENT)` (the lint against
# SQL built by formatting refuses `Fragment(DISCLOSURE_COLUMNS)`); `DISCLOSURE_COLUMNS` is its text
DISCLOSURE_FRAGMENT = Fragment(
    "d.state AS disclosure_state, d.reported_at AS disclosure_reported_at, d.notified_at AS disclosure_notified_at,"
    " d.acknowledged_at AS disclosure_acknowledged_at, d.deadline AS disclosure_deadline,"
    " d.extensions AS disclosure_extensions, d.published_at AS disclosure_published_at,"
    " d.published_because AS disclosure_published_because"
)
DISCLOSURE_COLUMNS = DISCLOSURE_FRAGMENT.sql


class DisclosureExtension(Answer):
    by: Annotated[str, enum(EXTENDED_BY)]
    days: int
    reason: str
    at: Timestamp


class DisclosureAnswer(Answer):
    """A finding's coordinated-disclosure clock: `immediate` when it never had one (fields null)."""

    state: Annotated[str, enum(("embargoed", "published", IMMEDIATE))]
    reported_at: Timestamp | None
    notified_at: Timestamp | None
    acknowledged_at: Timestamp | None
    deadline: Timestamp | None
    extensions: list[DisclosureExtension]
    published_at: Timestamp | None
    # null outside the enum (an enum over `str | None` would refuse the null an embargoed finding answers)
    published_because: Annotated[str, enum((*PUBLISHED_BECAUSE, IMMEDIATE), "why it became public")] | None


def disclosure_answer(row: Mapping[str, Any] | None) -> DisclosureAnswer:
    """The `disclosure` object from a row read with `DISCLOSURE_COLUMNS` (None, or a NULL state from an outer join:
    the finding never had a clock)."""
    if row is None or row.get("disclosure_state") is None:
        return DisclosureAnswer(
            state=IMMEDIATE, reported_at=None, notified_at=None, acknowledged_at=None, deadline=None,
            extensions=[], published_at=None, published_because=IMMEDIATE,
        )  # fmt: skip
    return DisclosureAnswer(
        state=row["disclosure_state"],
        reported_at=iso(row["disclosure_reported_at"]),
        notified_at=iso(row["disclosure_notified_at"]),
        acknowledged_at=iso(row["disclosure_acknowledged_at"]),
        deadline=iso(row["disclosure_deadline"]),
        extensions=[DisclosureExtension(**e) for e in row["disclosure_extensions"] or []],
        published_at=iso(row["disclosure_published_at"]),
        published_because=row["disclosure_published_because"],
    )
