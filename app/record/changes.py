"""The change feed's write side: the published set diffed against the public join set, entries written in the
change's transaction and numbered at commit (docs/domain.md §13 "Change feed", §12 decision 8)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Select,
    TextClause,
    bindparam,
    cast,
    false,
    func,
    literal,
    null,
    select,
    text,
    true,
)
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.elements import BindParameter

from app.kernel.audit import COMMIT_ORDER_LOCK
from app.kernel.paging import decode_id_cursor, encode_id_cursor
from app.kernel.sql import ONE, compiled, compose, outer, statement
from app.record.models import (
    COMMIT_SEQUENCE,
    FINDING_WITHDRAWN,
    LISTED_KIND,
    NUMBER_PENDING_STATEMENT,
    PUBLISHED,
    REPOSITORY_WITHDRAWN,
    STATUS,
    WITHDRAWAL_KINDS,
    Change,
    PublishedFinding,
)
from app.record.public import (
    LISTED,
    listed_repository,
    public_occurrence,
    repositories,
    repository_alias,
    scan_alias,
    scan_findings,
    scans,
)

# ---- the read contract (the export and the tombstones use these) ------------------------------------------------


def cursor_at(next_seq: int) -> str:
    """The feed cursor whose next entry is `next_seq` (>= 1; the start of the feed is 1)."""
    return encode_id_cursor(max(1, int(next_seq)))


def next_seq_of(cursor: str | None) -> int:
    """The first seq a cursor reads (1 for None); a malformed cursor is `paging.InvalidCursor` (400)."""
    return 1 if cursor is None else decode_id_cursor(cursor)


async def snapshot_cursor(session: AsyncSession) -> str:
    """The cursor that covers exactly what this session's snapshot sees: seq order is commit order, so every entry
    up to the largest visible seq is visible, and everything after it is not (run it in the export's REPEATABLE
    READ transaction)."""
    last = (await session.execute(text("SELECT max(seq) FROM changes"))).scalar_one()
    return cursor_at(int(last or 0) + 1)


_WITHDRAWALS_AFTER = compiled(
    select(func.count())
    .select_from(Change.__table__)
    .where(Change.__table__.c.seq >= bindparam("start"), Change.__table__.c.kind.in_(WITHDRAWAL_KINDS))
)


async def withdrawals_after(session: AsyncSession, cursor: str) -> int:
    """How many withdrawal entries (finding.withdrawn, repository.withdrawn) lie at or after `cursor`."""
    count = await session.execute(_WITHDRAWALS_AFTER, {"start": next_seq_of(cursor)})
    return int(count.scalar_one())


async def withdrawn_finding(session: AsyncSession, public_id: uuid.UUID | str) -> tuple[datetime, str] | None:
    """`(withdrawn_at, reason)` of an occurrence that was public and is not now (its latest withdrawal), or None:
    a finding that never was public, or that is public again."""
    row = (
        await session.execute(
            text(
                "SELECT ch.kind, ch.at, ch.reason FROM changes ch "
                "WHERE ch.finding = :id AND ch.seq IS NOT NULL ORDER BY ch.seq DESC LIMIT 1"
            ),
            {"id": str(public_id)},
        )
    ).first()
    if row is None or row.kind != FINDING_WITHDRAWN:
        return None
    if await _occurrence_public(session, public_id):  # a forgotten writer must never turn a public page into a 410
        return None
    return row.at, str(row.reason)


_finding_alias = scan_findings.alias("f")
_OCCURRENCE_PUBLIC = compiled(
    select(ONE)
    .select_from(
        _finding_alias.join(scan_alias, scan_alias.c.id == _finding_alias.c.scan_id).join(
            repository_alias, repository_alias.c.id == scan_alias.c.repository_id
        )
    )
    .where(_finding_alias.c.public_id == bindparam("id"), public_occurrence(_finding_alias))
)


async def _occurrence_public(session: AsyncSession, public_id: uuid.UUID | str) -> bool:
    found = await session.execute(_OCCURRENCE_PUBLIC, {"id": str(public_id)})
    return found.first() is not None


# ---- the write side: diff the published set against the public join set ----------------------------------------
# One INSERT/UPDATE/DELETE on the published set per statement, its RETURNING rows the entries; `{...}` are scope
# predicates; scoped diffs probe per row (`OFFSET 0`), the whole diff hashes (docs/domain.md §13 "Change feed").

_LISTED = """
WITH up AS (
  INSERT INTO published_repositories AS p (repository_id, listed)
  SELECT r.id, TRUE FROM repositories r WHERE ({repositories}) AND {listed}
  ORDER BY r.id
  ON CONFLICT (repository_id) DO UPDATE SET listed = TRUE WHERE NOT p.listed
  RETURNING p.repository_id, p.opaque_id
)
INSERT INTO changes (seq, kind, repository_id, repository_key)
SELECT {seq}, {kind}, repository_id, opaque_id FROM up ORDER BY repository_id
"""

_FINDINGS_WITHDRAWN = """
WITH gone AS (
  DELETE FROM published_findings p
  WHERE ({published}) AND {not_public}
  RETURNING p.scan_finding_id, p.public_id
)
INSERT INTO changes (seq, kind, finding, reason)
SELECT {seq}, {kind}, g.public_id,
       CASE WHEN {deleting} OR r.id IS NULL THEN 'deleted'
            WHEN r.listing_status <> {listed_status} THEN 'repository'
            ELSE 'moderation' END
FROM gone g
LEFT JOIN scan_findings f ON f.id = g.scan_finding_id
LEFT JOIN scans s ON s.id = f.scan_id
LEFT JOIN repositories r ON r.id = s.repository_id
ORDER BY g.scan_finding_id
"""

_REPOSITORIES_WITHDRAWN = """
WITH down AS (
  UPDATE published_repositories p SET listed = FALSE
  WHERE ({published}) AND p.listed AND {not_listed}
  RETURNING p.repository_id, p.opaque_id
)
INSERT INTO changes (seq, kind, repository_id, repository_key)
SELECT {seq}, {kind}, repository_id, opaque_id FROM down ORDER BY repository_id
"""

_FINDINGS_PUBLISHED = """
WITH ins AS (
  INSERT INTO published_findings (scan_finding_id, public_id, scan_id, repository_id, canonical_id)
  SELECT f.id, f.public_id, f.scan_id, s.repository_id, f.canonical_finding_id
  FROM scan_findings f JOIN scans s ON s.id = f.scan_id JOIN repositories r ON r.id = s.repository_id
  WHERE ({findings}) AND f.canonical_finding_id IS NOT NULL AND {public}
  ORDER BY f.id
  ON CONFLICT (scan_finding_id) DO NOTHING
  RETURNING scan_finding_id, public_id, repository_id, canonical_id
)
INSERT INTO changes (seq, kind, finding, canonical, repository_id, repository_key, pattern_key)
SELECT {seq}, {kind}, i.public_id, c.public_id, i.repository_id, pr.opaque_id, NULLIF(c.pattern_key, '')
FROM ins i JOIN canonical_findings c ON c.id = i.canonical_id
LEFT JOIN published_repositories pr ON pr.repository_id = i.repository_id
ORDER BY i.scan_finding_id
"""

_STATUSES = """
WITH up AS (
  INSERT INTO published_canonicals AS pc (canonical_id, public_id, repository_id, status)
  SELECT c.id, c.public_id, c.repository_id, c.status FROM canonical_findings c
  WHERE ({canonicals}) AND {announced}
  ORDER BY c.id
  ON CONFLICT (canonical_id) DO UPDATE SET status = EXCLUDED.status WHERE pc.status <> EXCLUDED.status
  RETURNING pc.canonical_id, pc.public_id, pc.status
)
INSERT INTO changes (seq, kind, canonical, status)
SELECT {seq}, {kind}, public_id, status FROM up ORDER BY canonical_id
"""

_UNPUBLISHED_CANONICALS = """
DELETE FROM published_canonicals pc
WHERE ({published})
  AND NOT {announced}
"""

# Scope predicates per grain: (repositories r, published repositories p, findings f/s, published findings p,
# canonicals c, published canonicals pc).
_GRAINS = (
    "repositories",
    "published_repositories",
    "findings",
    "published_findings",
    "canonicals",
    "published_canonicals",
)
_SCAN_ID: BindParameter[Any] = bindparam("scan_id")
_REPOSITORY_ID: BindParameter[Any] = bindparam("repository_id")
_SCAN_CANONICALS = select(scan_findings.c.canonical_finding_id).where(scan_findings.c.scan_id == _SCAN_ID)
_SCOPES: dict[str, dict[str, ColumnElement[bool]]] = {
    "all": dict.fromkeys(_GRAINS, true()),
    "repository": {
        "repositories": outer("r.id") == _REPOSITORY_ID,
        "published_repositories": outer("p.repository_id") == _REPOSITORY_ID,
        "findings": outer("s.repository_id") == _REPOSITORY_ID,
        "published_findings": outer("p.repository_id") == _REPOSITORY_ID,
        "canonicals": outer("c.repository_id") == _REPOSITORY_ID,
        "published_canonicals": outer("pc.repository_id") == _REPOSITORY_ID,
    },
    "scan": {
        "repositories": outer("r.id") == select(scans.c.repository_id).where(scans.c.id == _SCAN_ID).scalar_subquery(),
        "published_repositories": false(),  # a report's visibility never withdraws its repository
        "findings": outer("f.scan_id") == _SCAN_ID,
        "published_findings": outer("p.scan_id") == _SCAN_ID,
        "canonicals": outer("c.id").in_(_SCAN_CANONICALS),
        "published_canonicals": outer("pc.canonical_id").in_(_SCAN_CANONICALS),
    },
}


def _exists(query: Select[Any], *, probe: bool) -> ColumnElement[bool]:
    return (query.offset(0) if probe else query).exists()


def _announced(canonical_id: ColumnElement[Any], *, probe: bool) -> ColumnElement[bool]:
    """The canonical has a published finding."""
    p = PublishedFinding.__table__.alias("p")
    return _exists(select(ONE).where(p.c.canonical_id == canonical_id), probe=probe)


def _still_public(*, probe: bool) -> ColumnElement[bool]:
    """The published finding `p` is still in the public join set."""
    f, s, r = scan_findings.alias("f"), scans.alias("s"), repositories.alias("r")
    query = (
        select(ONE)
        .select_from(f.join(s, s.c.id == f.c.scan_id).join(r, r.c.id == s.c.repository_id))
        .where(f.c.id == outer("p.scan_finding_id"), f.c.canonical_finding_id.is_not(None), public_occurrence(f, s, r))
    )
    return _exists(query, probe=probe)


def _still_listed(*, probe: bool) -> ColumnElement[bool]:
    """The published repository `p` is still listed."""
    r = repositories.alias("r")
    return _exists(select(ONE).where(r.c.id == outer("p.repository_id"), listed_repository(r)), probe=probe)


def _statements(scope: str, *, deleting: bool = False) -> list[TextClause]:
    where = _SCOPES[scope]
    # `seq`: NULL (numbered at commit), except in the whole diff, which numbers as it inserts
    seq = func.nextval(COMMIT_SEQUENCE) if scope == "all" else cast(null(), BigInteger)
    probe = scope != "all"
    findings_withdrawn = statement(
        _FINDINGS_WITHDRAWN,
        published=where["published_findings"],
        not_public=true() if deleting else ~_still_public(probe=probe),
        deleting=true() if deleting else false(),
        listed_status=literal(LISTED),
        kind=literal(FINDING_WITHDRAWN),
        seq=seq,
    )
    repositories_withdrawn = statement(
        _REPOSITORIES_WITHDRAWN,
        published=where["published_repositories"],
        not_listed=true() if deleting else ~_still_listed(probe=probe),
        kind=literal(REPOSITORY_WITHDRAWN),
        seq=seq,
    )
    unpublished_canonicals = statement(
        _UNPUBLISHED_CANONICALS,
        published=where["published_canonicals"],
        announced=_announced(outer("pc.canonical_id"), probe=probe),
    )
    if deleting:  # nothing is announced for rows about to go, and their published canonicals are dropped
        return [findings_withdrawn, repositories_withdrawn, unpublished_canonicals]
    # order inside one transaction: a repository is listed before its findings are published, and its findings
    # are withdrawn before it is
    return [
        statement(
            _LISTED, repositories=where["repositories"], listed=listed_repository(), kind=literal(LISTED_KIND), seq=seq
        ),
        findings_withdrawn,
        repositories_withdrawn,
        statement(
            _FINDINGS_PUBLISHED,
            findings=where["findings"],
            public=public_occurrence(),
            kind=literal(PUBLISHED),
            seq=seq,
        ),
        statement(
            _STATUSES,
            canonicals=where["canonicals"],
            announced=_announced(outer("c.id"), probe=probe),
            kind=literal(STATUS),
            seq=seq,
        ),
        unpublished_canonicals,
    ]


_PREPARED = {scope: _statements(scope) for scope in _SCOPES}
_DELETING = _statements("repository", deleting=True)
# By pattern key: only canonicals this transaction changed (`updated_at = now()`), only announced ones, only an
# UPDATE (docs/domain.md §13 "Change feed")
_KEY_STATUSES = statement(
    """
WITH up AS (
  UPDATE published_canonicals pc SET status = c.status
  FROM canonical_findings c
  WHERE c.id = pc.canonical_id AND c.pattern_key = ANY(CAST(:keys AS text[])) AND c.updated_at = now()
    AND pc.status <> c.status
  RETURNING pc.canonical_id, pc.public_id, pc.status
)
INSERT INTO changes (kind, canonical, status) SELECT {kind}, public_id, status FROM up ORDER BY canonical_id
""",
    kind=literal(STATUS),
)


# A new report (`:scan_id`): nothing of it was ever published, so nothing can be withdrawn; the scan diff less its
# three withdrawal statements (its repository's listing, its findings, its canonicals' statuses), as CTEs of one
# statement (the report's last: app.record.outbox `settle_new_report`). `:listed` is the repository's listing as the
# transaction left it and the report public (so its published findings are public exactly then: a report published
# by the evidence worker may have been hidden meanwhile). No CTE reads
# what a sibling writes (they all see the statement's one snapshot): the findings' repository key is the row the
# first CTE inserted or the one that was there; a canonical is announced when its findings are published now
# (`:listed`; a held or embargoed occurrence announces nothing, not even its canonical) or were before. One INSERT writes the entries in the scan diff's order (listing, findings by id,
# statuses by canonical), so their ids, and the commit-order numbering at commit, follow it as before.
NEW_SCAN_ENTRIES = compose(
    """
listed_repository AS (
  INSERT INTO published_repositories AS p (repository_id, listed)
  SELECT CAST(:repository_id AS bigint), TRUE WHERE CAST(:listed AS boolean)
  ON CONFLICT (repository_id) DO UPDATE SET listed = TRUE WHERE NOT p.listed
  RETURNING p.repository_id, p.opaque_id
), repository_key AS (
  SELECT coalesce((SELECT opaque_id FROM listed_repository),
                  (SELECT opaque_id FROM published_repositories WHERE repository_id = :repository_id)) AS opaque_id
), published AS (
  INSERT INTO published_findings (scan_finding_id, public_id, scan_id, repository_id, canonical_id)
  SELECT f.id, f.public_id, f.scan_id, :repository_id, f.canonical_finding_id FROM scan_findings f
  WHERE f.scan_id = :scan_id AND f.canonical_finding_id IS NOT NULL AND f.published_at IS NOT NULL
    AND CAST(:listed AS boolean)
  ORDER BY f.id
  ON CONFLICT (scan_finding_id) DO NOTHING
  RETURNING scan_finding_id, public_id, canonical_id
), statuses AS (
  INSERT INTO published_canonicals AS pc (canonical_id, public_id, repository_id, status)
  SELECT c.id, c.public_id, c.repository_id, c.status FROM canonical_findings c
  WHERE c.id IN (SELECT canonical_finding_id FROM scan_findings WHERE scan_id = :scan_id AND published_at IS NOT NULL)
    AND (CAST(:listed AS boolean) OR {announced})
  ORDER BY c.id
  ON CONFLICT (canonical_id) DO UPDATE SET status = EXCLUDED.status WHERE pc.status <> EXCLUDED.status
  RETURNING pc.canonical_id, pc.public_id, pc.status
), entries AS (
  INSERT INTO changes (kind, finding, canonical, repository_id, repository_key, pattern_key, status)
  SELECT kind, finding, canonical, repository_id, repository_key, pattern_key, status FROM (
    SELECT 1 AS step, repository_id AS n, {listed_kind} AS kind, CAST(NULL AS uuid) AS finding,
           CAST(NULL AS uuid) AS canonical, repository_id, opaque_id AS repository_key,
           CAST(NULL AS text) AS pattern_key, CAST(NULL AS text) AS status
    FROM listed_repository
    UNION ALL
    SELECT 2, i.scan_finding_id, {published_kind}, i.public_id, c.public_id, CAST(:repository_id AS bigint),
           (SELECT opaque_id FROM repository_key), NULLIF(c.pattern_key, ''), NULL
    FROM published i JOIN canonical_findings c ON c.id = i.canonical_id
    UNION ALL
    SELECT 3, canonical_id, {status_kind}, NULL, public_id, NULL, NULL, NULL, status FROM statuses
  ) e
  ORDER BY step, n
  RETURNING id
)""",
    announced=_announced(outer("c.id"), probe=True),
    listed_kind=literal(LISTED_KIND),
    published_kind=literal(PUBLISHED),
    status_kind=literal(STATUS),
)


def seed_statements() -> list[TextClause]:
    """The whole diff (migration 0005 seeds the feed with it); run under the commit-order lock."""
    return _PREPARED["all"]


async def _run(session: AsyncSession, statements: list[TextClause], params: dict[str, Any]) -> int:
    written = 0
    for step in statements:
        result = await session.execute(step, params)
        written += int(result.rowcount or 0)  # type: ignore[attr-defined]
    return written


# two diffs of one repository never interleave: its row lock (callers already hold it; taking it again is free)
_LOCK_REPOSITORY = text("SELECT 1 FROM repositories WHERE id = :repository_id FOR UPDATE")
_LOCK_SCAN_REPOSITORY = text(
    "SELECT 1 FROM repositories WHERE id = (SELECT repository_id FROM scans WHERE id = :scan_id) FOR UPDATE"
)


async def sync_scan(session: AsyncSession, scan_id: int) -> int:
    """Announce what one report's change published, withdrew or re-statused (its repository's listing included)."""
    await session.execute(_LOCK_SCAN_REPOSITORY, {"scan_id": scan_id})
    return await _run(session, _PREPARED["scan"], {"scan_id": scan_id})


async def sync_repository(session: AsyncSession, repository_id: int, *, deleting: bool = False) -> int:
    """Announce a repository's listing change and its findings'. `deleting=True` (before a hard delete's rows go)
    withdraws all of them with reason `deleted`."""
    await session.execute(_LOCK_REPOSITORY, {"repository_id": repository_id})
    statements = _DELETING if deleting else _PREPARED["repository"]
    return await _run(session, statements, {"repository_id": repository_id})


async def sync_statuses(session: AsyncSession, keys: Iterable[str | None]) -> int:
    """Announce status changes of published canonicals under these pattern keys (a check, a quorum recompute)."""
    unique = sorted({k for k in keys if k})
    if not unique:
        return 0
    result = await session.execute(_KEY_STATUSES, {"keys": unique})
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


_COMMIT_ORDER = compiled(select(func.pg_advisory_xact_lock(COMMIT_ORDER_LOCK)))


async def sync_all(session: AsyncSession) -> int:
    """The whole diff, set-based: the migration's seed, and a backfill after bulk loads that bypass the services
    (bench data). It takes the commit-order lock first and numbers entries as it inserts them, so other writers'
    commits wait for it (run it when a bulk load or an upgrade runs anyway)."""
    await session.execute(_COMMIT_ORDER)
    await session.execute(NUMBER_PENDING_STATEMENT)  # anything this transaction wrote before, in its order
    return await _run(session, _PREPARED["all"], {})
