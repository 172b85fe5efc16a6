"""The outbox of the infestation projection: which pattern keys must be recounted, marked in the writer's
transaction and rung after its commit (docs/architecture.md "The kernel's rules in words", docs/domain.md §5)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from sqlalchemy import TextClause, literal
from sqlalchemy.ext.asyncio import AsyncSession

from app.kernel import db, outages
from app.kernel.aftercommit import after_commit
from app.kernel.sql import Fragment, compose, join, statement
from app.record import changes
from app.record.public import has_public_occurrence

log = logging.getLogger(__name__)

# A key names the repositories whose rows changed (`repository_ids`, the scoped refresh of docs/domain.md §5.2)
# while every mark of it names some and they stay few; a mark without repositories, or more than this many, makes
# it the whole key (NULL) until drained.
MAX_SCOPED_REPOSITORIES = 64

_UPSERT_DIRTY = """
INSERT INTO infestation_dirty_keys AS d (pattern_key, reason, repository_ids)
SELECT k, :reason, repos FROM ({source}) AS keys(k, repos)
WHERE k IS NOT NULL AND k <> ''
ORDER BY k
ON CONFLICT (pattern_key) DO UPDATE
  SET version = d.version + 1, dirtied_at = now(), reason = EXCLUDED.reason,
      repository_ids = CASE WHEN d.repository_ids IS NOT NULL AND EXCLUDED.repository_ids IS NOT NULL THEN (
        SELECT CASE WHEN count(DISTINCT r) <= {max_scoped} THEN array_agg(DISTINCT r ORDER BY r) END
        FROM unnest(d.repository_ids || EXCLUDED.repository_ids) AS r) END
"""

# Delist-safe: keys already projected for the repository plus keys of its canonicals with a public
# occurrence, ignoring listing_status (after a delist the listed join alone would return nothing).
KEYS_FOR_REPOSITORY = compose(
    """
SELECT m.pattern_key FROM infestation_pattern_repos m WHERE m.repository_id = :repository_id
UNION
SELECT c.pattern_key FROM canonical_findings c
WHERE c.repository_id = :repository_id AND c.pattern_key IS NOT NULL AND c.pattern_key <> ''
  AND {public_occurrence}
""",
    public_occurrence=has_public_occurrence(),
)

KEYS_FOR_SCAN = Fragment("""
SELECT DISTINCT c.pattern_key FROM scan_findings f
JOIN canonical_findings c ON c.id = f.canonical_finding_id
WHERE f.scan_id = :scan_id AND c.pattern_key IS NOT NULL AND c.pattern_key <> ''
""")


def _upsert_dirty(source: Fragment) -> TextClause:
    return statement(_UPSERT_DIRTY, source=source, max_scoped=literal(MAX_SCOPED_REPOSITORIES))


_MARK_KEYS = _upsert_dirty(
    Fragment(
        "SELECT unnest(CAST(:keys AS text[])), "
        "CASE WHEN CAST(:repository_id AS bigint) IS NOT NULL THEN ARRAY[CAST(:repository_id AS bigint)] END"
    )
)
# a report's canonicals all belong to its repository: the keys' rows changed there only
_MARK_SCAN = _upsert_dirty(
    compose(
        "SELECT pattern_key, ARRAY[s.repository_id] FROM ({keys}) AS k JOIN scans s ON s.id = :scan_id",
        keys=KEYS_FOR_SCAN,
    )
)
_MARK_REPOSITORY = _upsert_dirty(
    compose("SELECT pattern_key, ARRAY[CAST(:repository_id AS bigint)] FROM ({keys}) AS k", keys=KEYS_FOR_REPOSITORY)
)


# A new report's last statement (`settle_new_report`): `{recount}` (the repository's metrics, or nothing), the change
# feed's entries for the report (`changes.NEW_SCAN_ENTRIES`) and its keys marked dirty, as sibling CTEs: none reads
# what another writes (one snapshot), each only what earlier statements of the transaction wrote.
_SETTLE_NEW_REPORT = """
WITH {recount}{entries}, dirty AS (
{mark} RETURNING d.pattern_key
)
SELECT {listing} AS listing, (SELECT count(*) FROM entries) AS entries, (SELECT count(*) FROM dirty) AS dirty
"""
_MARK_REPORT_KEYS = compose(
    _UPSERT_DIRTY,
    source=Fragment("SELECT unnest(CAST(:keys AS text[])), ARRAY[CAST(:repository_id AS bigint)]"),
    max_scoped=literal(MAX_SCOPED_REPOSITORIES),
)
_settle_statements: dict[tuple[Fragment | None, Fragment | None], TextClause] = {}


def _settle_statement(recount: Fragment | None, alongside: Fragment | None) -> TextClause:
    found = _settle_statements.get((recount, alongside))
    if found is None:
        found = _settle_statements[recount, alongside] = statement(
            _SETTLE_NEW_REPORT,
            recount=join(
                "",
                [
                    Fragment("") if recount is None else compose("recount AS ({recount}), ", recount=recount),
                    Fragment("") if alongside is None else compose("alongside AS ({s}), ", s=alongside),
                ],
            ),
            entries=changes.NEW_SCAN_ENTRIES,
            mark=_MARK_REPORT_KEYS,
            listing=Fragment("CAST(NULL AS text)")
            if recount is None
            else Fragment("(SELECT listing_status FROM recount)"),
        )
    return found


async def settle_new_report(
    session: AsyncSession,
    scan_id: int,
    repository_id: int,
    keys: Iterable[str],
    *,
    listed: bool,
    recount: Fragment | None = None,
    alongside: tuple[Fragment, Mapping[str, Any]] | None = None,
) -> tuple[int, str | None]:
    """A report stored in this transaction (whose repository row the caller holds locked): what it published is
    announced on the change feed (`changes.NEW_SCAN_ENTRIES`) and its keys (the caller's assimilation knows them)
    marked dirty, in one statement, with the repository's `recount` (a data-modifying statement that reads
    none of the rows this one writes and returns the listing it set, or nothing when nothing moved) as a CTE.
    `listed`: the repository's listing once the report is stored (a recount run here must leave it as it
    is). `alongside`: one more data-modifying statement with its parameters, under the same rule, whose result is not
    read. Returns how many keys were marked and what the recount returned."""
    unique = sorted({k for k in keys if k})
    params = {"scan_id": scan_id, "repository_id": repository_id, "listed": listed, "keys": unique}
    extra, extra_params = (None, {}) if alongside is None else alongside
    settle = _settle_statement(recount, extra)
    [row] = await db.rows(session, settle, {**extra_params, **params, "reason": "assimilate"})
    if row.entries:
        ring_webhooks_after_commit()
    return _marked(row.dirty, "assimilate"), row.listing


async def mark_dirty(
    session: AsyncSession,
    keys: Iterable[str | None],
    reason: str,
    *,
    repository_id: int | None = None,
    ring: bool = True,
) -> int:
    """Record pattern keys whose rollups must be recomputed. Returns how many keys were marked. `repository_id`:
    the keys' rows changed in this repository only (their refresh then re-projects only it); None: anywhere.
    `ring=False` for a caller that drains the keys itself (reconcile). Also announces the status changes under
    these keys on the change feed (`app.record.changes`), in this transaction."""
    unique = sorted({k for k in keys if k})
    if await changes.sync_statuses(session, unique):
        ring_webhooks_after_commit()
    if not unique:
        return 0
    result = await session.execute(_MARK_KEYS, {"keys": unique, "reason": reason, "repository_id": repository_id})
    return _marked(result.rowcount, reason, ring=ring)  # type: ignore[attr-defined]


async def mark_scan_dirty(session: AsyncSession, scan_id: int, reason: str) -> int:
    """Keys of the canonicals linked to one report (visibility and listing are irrelevant here); the report's
    change is announced on the change feed in this transaction."""
    if await changes.sync_scan(session, scan_id):
        ring_webhooks_after_commit()
    result = await session.execute(_MARK_SCAN, {"scan_id": scan_id, "reason": reason})
    return _marked(result.rowcount, reason)  # type: ignore[attr-defined]


async def mark_repository_dirty(session: AsyncSession, repository_id: int, reason: str) -> int:
    """Delist-safe repository fan-out. One INSERT ... SELECT, whatever the number of keys; the drain job
    then refreshes them in sorted batches of at most 200 per job, chaining continuation jobs. The change feed
    announces the repository's change in this transaction; reason `delete` (called before the rows go) withdraws
    all of its findings and itself."""
    if await changes.sync_repository(session, repository_id, deleting=reason == "delete"):
        ring_webhooks_after_commit()
    result = await session.execute(_MARK_REPOSITORY, {"repository_id": repository_id, "reason": reason})
    return _marked(result.rowcount, reason)  # type: ignore[attr-defined]


def _marked(rowcount: int | None, reason: str, *, ring: bool = True) -> int:
    count = int(rowcount or 0)
    if count and ring and db.in_transaction():
        after_commit(ring_drain)
    return count


async def _ring(enqueue: Callable[[], Awaitable[None]], what: str, backstop: str) -> None:
    """Enqueue; a Redis outage is a warning (the work waits in Postgres for `backstop`)."""
    try:
        await enqueue()
    except Exception as exc:
        dependency = outages.dependency_of(exc)
        if dependency is None:
            log.warning("could not ring %s (%s); %s", what, exc, backstop)
        else:  # counted, and one line per interval however many commits ring during the outage
            outages.record(dependency, exc, source="ring")


async def ring_drain() -> None:
    """Ring the rollup worker."""
    from app.kernel.queue import enqueue_drain  # arq is imported late, where it is used

    await _ring(enqueue_drain, "the rollup worker", "the periodic sweep will pick the keys up")


def ring_webhooks_after_commit() -> None:
    """Ring the webhook deliveries once after the enclosing transaction commits: every writer of change-feed entries
    calls it (the outbox's diffs here, the statement service); the worker's per-minute run is the backstop."""
    if db.in_transaction():
        after_commit(ring_webhooks)


async def ring_webhooks() -> None:
    """Ring the webhook deliveries."""
    from app.kernel.queue import enqueue_webhooks  # arq is imported late, where it is used

    await _ring(enqueue_webhooks, "the webhook deliveries", "the per-minute run will send them")


async def schedule_refresh_after_commit() -> None:
    """Ring the worker now, from outside any transaction (callers that marked keys without `db.transaction()`).
    Raises inside a transaction: the worker could read the state before it."""
    if db.in_transaction():
        raise RuntimeError("schedule_refresh_after_commit() called inside a transaction")
    await ring_drain()
