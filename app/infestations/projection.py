"""The refresh of one pattern key: the public join set projected into the rollup tables (docs/domain.md §13 "Recompute
algorithm", docs/domain.md §5.2-§5.6).

Everything runs in SQL (INSERT ... SELECT): a hot key has 10^4+ canonicals and none of them is loaded into Python.
`refresh_pattern` recomputes a key from source; `recompute_windows` decays its windows from the instance table
alone. Which keys to refresh, and when, is the dirty-key queue's business (`app.infestations.dirty_queue`); whole
passes over every key are maintenance (`app.infestations.maintenance`).
"""

from __future__ import annotations

import time

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.infestations.models import COUNTS, WINDOWED_AGGREGATES, WINDOWS
from app.kernel import db
from app.kernel.metrics import REFRESH_DURATION, REFRESH_ERRORS, REFRESH_INSTANCES
from app.kernel.public import PUBLIC_JOIN

# Status rank of the representative instance: open-preferring, then newest (docs/domain.md §4.2).
_STATUS_RANK = "CASE status WHEN 'open' THEN 0 WHEN 'disputed' THEN 1 WHEN 'verified' THEN 2 ELSE 3 END"
_REPRESENTATIVE_ORDER = f"{_STATUS_RANK}, updated_at DESC, canonical_finding_id DESC"

_LOCK_KEY = "SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"

_INSTANCE_COLUMNS = (
    "pattern_key, repository_id, status, severity, title, file_path, sample_occurrence_public_id, sample_scan_id, "
    "sample_commit_sha, inserted_at, updated_at"
)

# One row per canonical of the public join set (docs/domain.md §3), carrying its newest PUBLIC occurrence as the sample.
# The key's instance rows are reconciled with it in one statement: rows that really changed are updated (a refresh
# of a hot key under a storm rewrites a handful of its 10^4 rows, not all of them), rows that left the join set are
# deleted, and a canonical whose pattern_key changed has its row moved here from its old key.
_SYNC_INSTANCES = f"""
WITH src AS (
  SELECT DISTINCT ON (c.id)
    c.id AS canonical_finding_id, c.pattern_key, c.repository_id, c.status, c.severity,
    COALESCE(NULLIF(c.title, ''), 'Unknown pattern') AS title, c.file_path,
    f.public_id AS sample_occurrence_public_id, s.id AS sample_scan_id, s.commit_sha AS sample_commit_sha,
    c.inserted_at, c.updated_at
  FROM canonical_findings c
  JOIN repositories r ON r.id = c.repository_id
  JOIN scan_findings f ON f.canonical_finding_id = c.id
  JOIN scans s ON s.id = f.scan_id
  WHERE c.pattern_key = :key AND c.pattern_key <> '' AND {PUBLIC_JOIN}
  ORDER BY c.id, s.inserted_at DESC, f.id DESC
),
upserted AS (
  INSERT INTO infestation_pattern_instances AS i (canonical_finding_id, {_INSTANCE_COLUMNS})
  SELECT canonical_finding_id, {_INSTANCE_COLUMNS} FROM src
  ON CONFLICT (canonical_finding_id) DO UPDATE SET ({_INSTANCE_COLUMNS}) = (
    EXCLUDED.pattern_key, EXCLUDED.repository_id, EXCLUDED.status, EXCLUDED.severity, EXCLUDED.title,
    EXCLUDED.file_path, EXCLUDED.sample_occurrence_public_id, EXCLUDED.sample_scan_id, EXCLUDED.sample_commit_sha,
    EXCLUDED.inserted_at, EXCLUDED.updated_at)
  WHERE (i.{_INSTANCE_COLUMNS.replace(", ", ", i.")}) IS DISTINCT FROM (
    EXCLUDED.pattern_key, EXCLUDED.repository_id, EXCLUDED.status, EXCLUDED.severity, EXCLUDED.title,
    EXCLUDED.file_path, EXCLUDED.sample_occurrence_public_id, EXCLUDED.sample_scan_id, EXCLUDED.sample_commit_sha,
    EXCLUDED.inserted_at, EXCLUDED.updated_at)
  RETURNING 1
),
removed AS (
  DELETE FROM infestation_pattern_instances i
  WHERE i.pattern_key = :key AND NOT EXISTS (SELECT 1 FROM src WHERE src.canonical_finding_id = i.canonical_finding_id)
  RETURNING 1
)
SELECT (SELECT count(*) FROM src) AS instances, (SELECT count(*) FROM upserted) AS written,
       (SELECT count(*) FROM removed) AS removed
"""

_MEMBERSHIP_COLUMNS = (
    "instance_count, open_count, verified_count, fixed_count, disputed_count, primary_status, severity, title, "
    "sample_occurrence_public_id, first_seen_at, last_seen_at"
)
_MEMBERSHIP_EXCLUDED = ", ".join(f"EXCLUDED.{c}" for c in _MEMBERSHIP_COLUMNS.split(", "))

# Memberships from the key's instance rows; unchanged memberships are not rewritten.
_UPSERT_MEMBERSHIPS = f"""
INSERT INTO infestation_pattern_repos AS m (
  pattern_key, repository_id, instance_count, open_count, verified_count, fixed_count, disputed_count,
  primary_status, severity, title, sample_occurrence_public_id, first_seen_at, last_seen_at, inserted_at, updated_at)
SELECT :key, agg.repository_id, agg.instance_count, agg.open_count, agg.verified_count, agg.fixed_count,
  agg.disputed_count,
  CASE WHEN agg.open_count > 0 THEN 'open' WHEN agg.disputed_count > 0 THEN 'disputed'
       WHEN agg.verified_count > 0 THEN 'verified' ELSE 'fixed' END,
  rep.severity, rep.title, rep.sample_occurrence_public_id, agg.first_seen_at, agg.last_seen_at, now(), now()
FROM (
  SELECT repository_id, count(*) AS instance_count,
    count(*) FILTER (WHERE status = 'open') AS open_count,
    count(*) FILTER (WHERE status = 'verified') AS verified_count,
    count(*) FILTER (WHERE status = 'fixed') AS fixed_count,
    count(*) FILTER (WHERE status = 'disputed') AS disputed_count,
    min(inserted_at) AS first_seen_at, max(updated_at) AS last_seen_at
  FROM infestation_pattern_instances WHERE pattern_key = :key GROUP BY repository_id
) agg
JOIN (
  SELECT DISTINCT ON (repository_id) repository_id, severity, title, sample_occurrence_public_id
  FROM infestation_pattern_instances WHERE pattern_key = :key
  ORDER BY repository_id, {_REPRESENTATIVE_ORDER}
) rep USING (repository_id)
ON CONFLICT (pattern_key, repository_id) DO UPDATE SET ({_MEMBERSHIP_COLUMNS}) = ({_MEMBERSHIP_EXCLUDED}),
  updated_at = now()
WHERE (m.{_MEMBERSHIP_COLUMNS.replace(", ", ", m.")}) IS DISTINCT FROM ({_MEMBERSHIP_EXCLUDED})
"""

_DELETE_STALE_MEMBERSHIPS = """
DELETE FROM infestation_pattern_repos e
WHERE e.pattern_key = :key
  AND NOT EXISTS (SELECT 1 FROM infestation_pattern_instances i
                  WHERE i.pattern_key = e.pattern_key AND i.repository_id = e.repository_id)
"""


def _since(window: int) -> str:
    # W x 24 h exactly (not 'W days', which follows DST in a non-UTC session time zone): same `since` as the
    # legacy read (now - days x 24 h).
    return f"now() - interval '{window * 24} hours'"


def _window_columns() -> list[str]:
    return [f"{name}_{w}d" for w in WINDOWS for name in WINDOWED_AGGREGATES]


def _window_aggregates() -> str:
    parts: list[str] = []
    for w in WINDOWS:
        inside = f"updated_at >= {_since(w)}"
        parts += [
            f"count(DISTINCT repository_id) FILTER (WHERE {inside}) AS repo_count_{w}d",
            f"count(*) FILTER (WHERE {inside}) AS instance_count_{w}d",
            *(
                f"count(*) FILTER (WHERE {inside} AND status = '{s}') AS {s}_count_{w}d"
                for s in ("open", "verified", "fixed", "disputed")
            ),
            f"max(updated_at) FILTER (WHERE {inside}) AS last_seen_at_{w}d",
        ]
    return ",\n    ".join(parts)


_ALL_TIME_COLUMNS = [*COUNTS, "first_seen_at", "last_seen_at"]
_REPRESENTATIVE_COLUMNS = ["title", "severity", "sample_file_path", "sample_occurrence_public_id"]
_PATTERN_COLUMNS = [*_REPRESENTATIVE_COLUMNS, *_ALL_TIME_COLUMNS, *_window_columns(), "refreshed_at"]

_UPSERT_PATTERN = f"""
INSERT INTO infestation_patterns AS p (pattern_key, {", ".join(_PATTERN_COLUMNS)}, inserted_at, updated_at)
SELECT :key, rep.title, rep.severity, rep.file_path, rep.sample_occurrence_public_id,
  agg.*, now(), now(), now()
FROM (
  SELECT count(DISTINCT repository_id) AS repo_count, count(*) AS instance_count,
    count(*) FILTER (WHERE status = 'open') AS open_count,
    count(*) FILTER (WHERE status = 'verified') AS verified_count,
    count(*) FILTER (WHERE status = 'fixed') AS fixed_count,
    count(*) FILTER (WHERE status = 'disputed') AS disputed_count,
    min(inserted_at) AS first_seen_at, max(updated_at) AS last_seen_at,
    {_window_aggregates()}
  FROM infestation_pattern_instances WHERE pattern_key = :key
) agg
CROSS JOIN (
  SELECT title, severity, file_path, sample_occurrence_public_id
  FROM infestation_pattern_instances WHERE pattern_key = :key
  ORDER BY {_REPRESENTATIVE_ORDER} LIMIT 1
) rep
ON CONFLICT (pattern_key) DO UPDATE SET
  {", ".join(f"{c} = EXCLUDED.{c}" for c in _PATTERN_COLUMNS)}, updated_at = now()
"""

_UPDATE_WINDOWS = f"""
UPDATE infestation_patterns p SET
  {", ".join(f"{c} = w.{c}" for c in _window_columns())}, refreshed_at = now()
FROM (
  SELECT {_window_aggregates()}
  FROM infestation_pattern_instances WHERE pattern_key = :key
  HAVING count(*) > 0
) w
WHERE p.pattern_key = :key
"""

_DELETE_PROJECTION = [
    "DELETE FROM infestation_pattern_instances WHERE pattern_key = :key",
    "DELETE FROM infestation_pattern_repos WHERE pattern_key = :key",
    "DELETE FROM infestation_patterns WHERE pattern_key = :key",
]


async def _delete_projection(session: AsyncSession, key: str) -> None:
    for statement in _DELETE_PROJECTION:
        await session.execute(text(statement), {"key": key})


async def refresh_pattern(pattern_key: str, *, reason: str = "manual") -> int:
    """Recompute one key's instances, memberships and pattern row from source, in one transaction.

    Returns the number of instances the key now has (its public join set); 0 means the key left the public join
    set and its projection was hard-deleted (its show page then 404s). Serialized per key by a transaction-scoped
    advisory lock. Only rows that really changed are written."""
    started = time.perf_counter()
    try:
        async with db.transaction() as session:
            await session.execute(text(_LOCK_KEY), {"key": pattern_key})
            synced = (await session.execute(text(_SYNC_INSTANCES), {"key": pattern_key})).mappings().one()
            instances = int(synced["instances"])
            if instances == 0:
                await _delete_projection(session, pattern_key)
            else:
                await session.execute(text(_UPSERT_MEMBERSHIPS), {"key": pattern_key})
                await session.execute(text(_DELETE_STALE_MEMBERSHIPS), {"key": pattern_key})
                await session.execute(text(_UPSERT_PATTERN), {"key": pattern_key})
    except Exception:
        REFRESH_ERRORS.inc()
        raise
    REFRESH_DURATION.labels(reason=reason).observe(time.perf_counter() - started)
    REFRESH_INSTANCES.labels(reason=reason).observe(instances)
    return instances


async def recompute_windows(pattern_key: str) -> None:
    """Hourly window decay for one key from the instance table only (no source join, docs/domain.md §5.4).
    `updated_at` is left alone: it moves only with a refresh from source, which the hot-key cap reads (§5.5).

    No instances left (e.g. a hard repository delete cascaded them away) -> the key's projection is deleted;
    instances without a pattern row -> a full `refresh_pattern`."""
    async with db.transaction() as session:
        await session.execute(text(_LOCK_KEY), {"key": pattern_key})
        updated = await session.execute(text(_UPDATE_WINDOWS), {"key": pattern_key})
        if int(updated.rowcount or 0) == 1:  # type: ignore[attr-defined]
            return
        has_instances = (
            await session.execute(
                text("SELECT EXISTS (SELECT 1 FROM infestation_pattern_instances WHERE pattern_key = :key)"),
                {"key": pattern_key},
            )
        ).scalar_one()
        if not has_instances:
            await _delete_projection(session, pattern_key)
            return
    await refresh_pattern(pattern_key, reason="window_decay")
