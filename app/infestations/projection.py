"""The projection of the public join set into the rollup tables (docs/domain.md §13 "Recompute algorithm",
docs/domain.md §5.2-§5.6): one key at a time, or every key of a key range at once.

Everything runs in SQL (INSERT ... SELECT): a hot key has 10^4+ canonicals and none of them is loaded into Python.
Each statement is written once over a set of keys (`Keys`: one key, or a key range) so the per-key refresh and the
set-based backfill are the same SQL with a different `WHERE`. `refresh_pattern` recomputes a key from source;
`recompute_windows` decays its windows from the instance table alone; `project_range` and `recompute_range` do the
same for every key of a range in a few large statements. Which keys to refresh, and when, is the dirty-key queue's
business (`app.infestations.dirty_queue`); whole passes over every key are maintenance
(`app.infestations.maintenance`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cache

from sqlalchemy import ARRAY, BigInteger, ColumnElement, TextClause, and_, any_, bindparam, cast, column, literal, text
from sqlalchemy import table as _table
from sqlalchemy.ext.asyncio import AsyncSession

from app.infestations.models import COUNTS, UNKNOWN_TITLE, WINDOWED_AGGREGATES, status_rank
from app.kernel import db
from app.kernel.metrics import REFRESH_DURATION, REFRESH_ERRORS, REFRESH_INSTANCES, REFRESH_SCOPES
from app.kernel.public import listed_repository, public_scan
from app.kernel.sql import WINDOW_DAYS, Fragment, Name, Window, compose, join, names, statement
from app.reports.models import CANONICAL_STATUSES

# The representative instance: open-preferring, then newest (docs/domain.md §4.2).
_REPRESENTATIVE_ORDER = compose(
    "{rank}, updated_at DESC, canonical_finding_id DESC", rank=status_rank(column("status"))
)

# A key's refresh is serialized per key; a range statement cannot take thousands of key locks, so keys are also
# grouped in 257 buckets (the first two hex digits, or "other"): a refresh holds its bucket's lock shared, a range
# statement holds the locks of every bucket it spans exclusively (in ascending order, so ranges never deadlock). A
# range written from an older snapshot can then never overwrite a newer per-key refresh, nor the reverse, while
# ranges run side by side.
_LOCK_KEY = (
    "SELECT pg_advisory_xact_lock_shared(hashtextextended('infestations:bucket:' || :bucket, 0)), "
    "pg_advisory_xact_lock(hashtextextended(:key, 0))"
)
_LOCK_BUCKETS = (
    "SELECT count(pg_advisory_xact_lock(hashtextextended('infestations:bucket:' || b, 0))) "
    "FROM unnest(CAST(:buckets AS text[])) AS b"
)
_OTHER = "other"  # the bucket of a key that does not start with two hex digits (pattern keys are sha256 hex)
_HEX = frozenset("0123456789abcdef")


def _bucket(key: str) -> str:
    return key[:2] if len(key) >= 2 and set(key[:2]) <= _HEX else _OTHER


def _lock_key_params(key: str) -> dict[str, str]:
    return {"key": key, "bucket": _bucket(key)}


# a range statement aggregates 10^5+ instance rows: let its hashes stay in memory
_RANGE_WORK_MEM = "SET LOCAL work_mem = '128MB'"


@dataclass(frozen=True)
class Keys:
    """The rows a statement projects: one `key` (only its rows in `repositories` when given), or every key in
    `[lo, hi)` (`hi` None: no upper bound)."""

    key: str | None = None
    lo: str = ""
    hi: str | None = None
    repositories: tuple[int, ...] | None = None

    @property
    def shape(self) -> str:
        if self.key is not None:
            return "key" if self.repositories is None else "key_repositories"
        return "range" if self.hi is not None else "open_range"

    @property
    def params(self) -> dict[str, object]:
        if self.key is not None:
            if self.repositories is None:
                return {"key": self.key}
            return {"key": self.key, "repositories": list(self.repositories)}
        return {"lo": self.lo} if self.hi is None else {"lo": self.lo, "hi": self.hi}


_KEYED = _table("keyed", column("pattern_key"), column("repository_id"))  # any rollup table, by its alias


def _keys(shape: str, alias: str) -> ColumnElement[bool]:
    """The rows of `Keys` of this shape in the table aliased `alias`."""
    rows = _KEYED.alias(alias)
    if shape == "key":
        return rows.c.pattern_key == bindparam("key")
    if shape == "key_repositories":
        repositories = any_(cast(bindparam("repositories"), ARRAY(BigInteger)))
        return and_(rows.c.pattern_key == bindparam("key"), rows.c.repository_id == repositories)
    lo = rows.c.pattern_key >= bindparam("lo")
    return and_(lo, rows.c.pattern_key < bindparam("hi")) if shape == "range" else lo


_EXCLUDED = Fragment("EXCLUDED")


def _excluded(columns: tuple[str, ...]) -> Fragment:
    return join(", ", [compose("EXCLUDED.{c}", c=Name(c)) for c in columns])


def _assigned(columns: list[str], source: Fragment) -> Fragment:
    """`c = source.c, ...`"""
    return join(", ", [compose("{c} = {source}.{c}", c=Name(c), source=source) for c in columns])


_INSTANCE_COLUMNS = (
    "pattern_key",
    "repository_id",
    "status",
    "severity",
    "title",
    "file_path",
    "sample_occurrence_public_id",
    "sample_scan_id",
    "sample_commit_sha",
    "inserted_at",
    "updated_at",
)


@cache
def _sync_instances(shape: str) -> TextClause:
    """One row per canonical of the public join set (docs/domain.md §3), carrying its newest PUBLIC occurrence as
    the sample. The keys' instance rows are reconciled with it in one statement: rows that really changed are updated
    (a refresh of a hot key under a storm rewrites a handful of its 10^4 rows, not all of them), rows that left the
    join set are deleted, and a canonical whose pattern_key changed has its row moved here from its old key.
    The sample is a LATERAL probe per canonical (occurrences by canonical_finding_id, newest first): the cost follows
    the keys' canonicals, where a join over every occurrence had the planner hash the whole occurrence table for
    each refresh (10^7 rows at Tier C: most of a hot key's refresh and of each backfill range)."""
    return statement(
        """
WITH src AS (
  SELECT
    c.id AS canonical_finding_id, c.pattern_key, c.repository_id, c.status, c.severity,
    COALESCE(NULLIF(c.title, ''), {unknown}) AS title, c.file_path,
    o.public_id AS sample_occurrence_public_id, o.scan_id AS sample_scan_id, o.commit_sha AS sample_commit_sha,
    c.inserted_at, c.updated_at
  FROM canonical_findings c
  JOIN repositories r ON r.id = c.repository_id
  CROSS JOIN LATERAL (
    SELECT f.public_id, s.id AS scan_id, s.commit_sha
    FROM scan_findings f JOIN scans s ON s.id = f.scan_id
    WHERE f.canonical_finding_id = c.id AND {public}
    ORDER BY s.inserted_at DESC, f.id DESC
    LIMIT 1
  ) o
  WHERE {keys_c} AND c.pattern_key <> '' AND {listed}
),
upserted AS (
  INSERT INTO infestation_pattern_instances AS i (canonical_finding_id, {columns})
  SELECT canonical_finding_id, {columns} FROM src
  ON CONFLICT (canonical_finding_id) DO UPDATE SET ({columns}) = ({excluded})
  WHERE ({existing}) IS DISTINCT FROM ({excluded})
  RETURNING 1
),
removed AS (
  DELETE FROM infestation_pattern_instances i
  WHERE {keys_i}
    AND NOT EXISTS (SELECT 1 FROM src WHERE src.canonical_finding_id = i.canonical_finding_id)
  RETURNING 1
)
SELECT (SELECT count(*) FROM src) AS instances, (SELECT count(*) FROM upserted) AS written,
       (SELECT count(*) FROM removed) AS removed
""",
        public=public_scan(),
        unknown=literal(UNKNOWN_TITLE),
        listed=listed_repository(),
        keys_c=_keys(shape, "c"),
        keys_i=_keys(shape, "i"),
        columns=names(_INSTANCE_COLUMNS),
        existing=names(_INSTANCE_COLUMNS, prefix="i"),
        excluded=_excluded(_INSTANCE_COLUMNS),
    )


_MEMBERSHIP_COLUMNS = (
    "instance_count",
    "open_count",
    "verified_count",
    "fixed_count",
    "disputed_count",
    "primary_status",
    "severity",
    "title",
    "sample_occurrence_public_id",
    "first_seen_at",
    "last_seen_at",
)


@cache
def _upsert_memberships(shape: str) -> TextClause:
    """Memberships from the keys' instance rows; unchanged memberships are not rewritten."""
    return statement(
        """
INSERT INTO infestation_pattern_repos AS m (
  pattern_key, repository_id, instance_count, open_count, verified_count, fixed_count, disputed_count,
  primary_status, severity, title, sample_occurrence_public_id, first_seen_at, last_seen_at, inserted_at, updated_at)
SELECT agg.pattern_key, agg.repository_id, agg.instance_count, agg.open_count, agg.verified_count, agg.fixed_count,
  agg.disputed_count,
  CASE WHEN agg.open_count > 0 THEN 'open' WHEN agg.disputed_count > 0 THEN 'disputed'
       WHEN agg.verified_count > 0 THEN 'verified' ELSE 'fixed' END,
  rep.severity, rep.title, rep.sample_occurrence_public_id, agg.first_seen_at, agg.last_seen_at, now(), now()
FROM (
  SELECT pattern_key, repository_id, count(*) AS instance_count,
    count(*) FILTER (WHERE status = 'open') AS open_count,
    count(*) FILTER (WHERE status = 'verified') AS verified_count,
    count(*) FILTER (WHERE status = 'fixed') AS fixed_count,
    count(*) FILTER (WHERE status = 'disputed') AS disputed_count,
    min(inserted_at) AS first_seen_at, max(updated_at) AS last_seen_at
  FROM infestation_pattern_instances i WHERE {keys} GROUP BY pattern_key, repository_id
) agg
JOIN (
  SELECT DISTINCT ON (pattern_key, repository_id) pattern_key, repository_id, severity, title,
    sample_occurrence_public_id
  FROM infestation_pattern_instances i WHERE {keys}
  ORDER BY pattern_key, repository_id, {order}
) rep USING (pattern_key, repository_id)
ON CONFLICT (pattern_key, repository_id) DO UPDATE SET ({columns}) = ({excluded}),
  updated_at = now()
WHERE ({existing}) IS DISTINCT FROM ({excluded})
""",
        keys=_keys(shape, "i"),
        order=_REPRESENTATIVE_ORDER,
        columns=names(_MEMBERSHIP_COLUMNS),
        existing=names(_MEMBERSHIP_COLUMNS, prefix="m"),
        excluded=_excluded(_MEMBERSHIP_COLUMNS),
    )


@cache
def _delete_stale_memberships(shape: str) -> TextClause:
    """Memberships of the keys left without instances in their repository. A set difference over the keys' rows
    (hashed or sorted, linear in the keys' size whatever the planner estimates), not an anti-join probe per
    membership: no index leads with (pattern_key, repository_id), so a nested-loop probe walks the key's every
    instance, quadratic in a hot key (a key range holding a 120k-repository key at Tier C spent minutes here).
    The keys' predicate stands on every side: the planner carries equalities across a join, not a range's bounds."""
    return statement(
        """
DELETE FROM infestation_pattern_repos e
USING (
  SELECT m.pattern_key, m.repository_id FROM infestation_pattern_repos m WHERE {keys_m}
  EXCEPT
  SELECT i.pattern_key, i.repository_id FROM infestation_pattern_instances i WHERE {keys_i}
) gone
WHERE {keys_e} AND e.pattern_key = gone.pattern_key AND e.repository_id = gone.repository_id
""",
        keys_m=_keys(shape, "m"),
        keys_i=_keys(shape, "i"),
        keys_e=_keys(shape, "e"),
    )


def _window_columns() -> list[str]:
    return [f"{name}_{w}d" for w in WINDOW_DAYS for name in WINDOWED_AGGREGATES]


def _status_value(status: str) -> ColumnElement[bool]:
    return column("status") == literal(status)


# Window aggregates in two steps: per (key, repository) first (plain counts, one hash aggregate), then per key, so
# a window's repositories are `count(*) FILTER (n > 0)` rather than a sort-based count(DISTINCT) per window.
def _per_repository(shape: str) -> Fragment:
    parts = [Fragment("count(*) AS n")]
    parts += [
        compose("count(*) FILTER (WHERE {status}) AS {s}_n", status=_status_value(s), s=Name(s))
        for s in CANONICAL_STATUSES
    ]
    parts += [Fragment("min(inserted_at) AS first_seen_at"), Fragment("max(updated_at) AS last_seen_at")]
    for w in map(Window, WINDOW_DAYS):
        inside = column("updated_at") >= w.since
        parts += [
            compose("count(*) FILTER (WHERE {inside}) AS n_{w}d", inside=inside, w=w),
            *(
                compose(
                    "count(*) FILTER (WHERE {inside} AND {status}) AS {s}_n_{w}d",
                    inside=inside,
                    status=_status_value(s),
                    s=Name(s),
                    w=w,
                )
                for s in CANONICAL_STATUSES
            ),
            compose("max(updated_at) FILTER (WHERE {inside}) AS last_seen_at_{w}d", inside=inside, w=w),
        ]
    return compose(
        """SELECT pattern_key, repository_id, {parts}
  FROM infestation_pattern_instances i WHERE {keys} GROUP BY pattern_key, repository_id""",
        parts=join(", ", parts),
        keys=_keys(shape, "i"),
    )


def _window_aggregates() -> list[Fragment]:
    """`{name}_{W}d` of docs/domain.md §5.3, over the per-repository rows `pr`."""
    parts: list[Fragment] = []
    for w in map(Window, WINDOW_DAYS):
        parts += [
            compose("count(*) FILTER (WHERE pr.n_{w}d > 0)::int AS repo_count_{w}d", w=w),
            compose("sum(pr.n_{w}d)::int AS instance_count_{w}d", w=w),
            *(
                compose("sum(pr.{s}_n_{w}d)::int AS {s}_count_{w}d", s=Name(s), w=w)
                for s in ("open", "verified", "fixed", "disputed")
            ),
            compose("max(pr.last_seen_at_{w}d) AS last_seen_at_{w}d", w=w),
        ]
    return parts


_ALL_TIME_COLUMNS = [*COUNTS, "first_seen_at", "last_seen_at"]
_ALL_TIME_AGGREGATES = [
    Fragment("count(*)::int AS repo_count"),
    Fragment("sum(pr.n)::int AS instance_count"),
    *(compose("sum(pr.{s}_n)::int AS {s}_count", s=Name(s)) for s in ("open", "verified", "fixed", "disputed")),
    Fragment("min(pr.first_seen_at) AS first_seen_at"),
    Fragment("max(pr.last_seen_at) AS last_seen_at"),
]
_REPRESENTATIVE_COLUMNS = ["title", "severity", "sample_file_path", "sample_occurrence_public_id"]
_PATTERN_COLUMNS = [*_REPRESENTATIVE_COLUMNS, *_ALL_TIME_COLUMNS, *_window_columns(), "refreshed_at"]


@cache
def _upsert_patterns(shape: str) -> TextClause:
    """The pattern row of every key with instances: representative fields, all-time and window aggregates."""
    return _upsert_patterns_sql(shape).statement()


@cache
def _upsert_patterns_sql(shape: str) -> Fragment:
    return compose(
        """
INSERT INTO infestation_patterns AS p (pattern_key, {columns}, inserted_at, updated_at)
SELECT agg.pattern_key, rep.title, rep.severity, rep.file_path, rep.sample_occurrence_public_id,
  {aggregated}, now(), now(), now()
FROM (
  SELECT pr.pattern_key, {aggregates}
  FROM ({per_repository}) pr
  GROUP BY pr.pattern_key
) agg
JOIN (
  SELECT DISTINCT ON (pattern_key) pattern_key, title, severity, file_path, sample_occurrence_public_id
  FROM infestation_pattern_instances i WHERE {keys}
  ORDER BY pattern_key, {order}
) rep USING (pattern_key)
ON CONFLICT (pattern_key) DO UPDATE SET
  {assigned}, updated_at = now()
""",
        columns=names(_PATTERN_COLUMNS),
        aggregated=names([*_ALL_TIME_COLUMNS, *_window_columns()], prefix="agg"),
        aggregates=join(",\n    ", [*_ALL_TIME_AGGREGATES, *_window_aggregates()]),
        per_repository=_per_repository(shape),
        keys=_keys(shape, "i"),
        order=_REPRESENTATIVE_ORDER,
        assigned=_assigned(_PATTERN_COLUMNS, _EXCLUDED),
    )


@cache
def _delete_stale_patterns(shape: str) -> TextClause:
    """The keys' predicate is repeated on `i`: the planner carries equalities across a join, not a range's bounds,
    so a hashed anti-join would otherwise read the whole instance table for every range."""
    return _stale_patterns(shape).statement()


@cache
def _delete_stale_patterns_and_memberships(shape: str) -> TextClause:
    return statement(
        """
WITH gone AS ({stale} RETURNING pattern_key)
DELETE FROM infestation_pattern_repos m USING gone WHERE m.pattern_key = gone.pattern_key
""",
        stale=_stale_patterns(shape),
    )


def _stale_patterns(shape: str) -> Fragment:
    return compose(_STALE_PATTERNS, keys_p=_keys(shape, "p"), keys_i=_keys(shape, "i"))


_STALE_PATTERNS = """
DELETE FROM infestation_patterns p
WHERE {keys_p}
  AND NOT EXISTS (SELECT 1 FROM infestation_pattern_instances i
                  WHERE i.pattern_key = p.pattern_key AND {keys_i})
"""


@cache
def _update_windows(shape: str) -> TextClause:
    """The window columns (and refreshed_at, not updated_at) of every key with instances, from the instances."""
    return statement(
        """
UPDATE infestation_patterns p SET
  {assigned}, refreshed_at = now()
FROM (
  SELECT pr.pattern_key, {aggregates}
  FROM ({per_repository}) pr
  GROUP BY pr.pattern_key
) w
WHERE p.pattern_key = w.pattern_key AND {keys}
""",
        assigned=_assigned(_window_columns(), Fragment("w")),
        aggregates=join(", ", _window_aggregates()),
        per_repository=_per_repository(shape),
        keys=_keys(shape, "p"),
    )


@cache
def _sync_status_windows(shape: str) -> TextClause:
    """Per (key, status, window) counts for the status-filtered lists (docs/domain.md §1.8): repositories and
    instances with that status updated inside the window (all time for window 0) and their newest `updated_at`.
    Only (status, window) pairs with instances have a row; changed rows are rewritten, emptied ones deleted."""
    windows = list(map(Window, WINDOW_DAYS))
    per_repository = join(
        ", ",
        [
            Fragment("count(*) AS n_0"),
            Fragment("max(updated_at) AS last_0"),
            *(compose("count(*) FILTER (WHERE {inside}) AS n_{w}", inside=_inside(w), w=w) for w in windows),
            *(compose("max(updated_at) FILTER (WHERE {inside}) AS last_{w}", inside=_inside(w), w=w) for w in windows),
        ],
    )
    rows = join(
        ", ", [Fragment("(0, pr.n_0, pr.last_0)"), *(compose("({w}, pr.n_{w}, pr.last_{w})", w=w) for w in windows)]
    )
    return statement(
        """
WITH pr AS (
  SELECT pattern_key, status, repository_id, {per_repository}
  FROM infestation_pattern_instances i WHERE {keys_i}
  GROUP BY pattern_key, status, repository_id
),
agg AS (
  SELECT pr.pattern_key, pr.status, w.window_days, count(*) FILTER (WHERE w.n > 0)::int AS repo_count,
    sum(w.n)::int AS instance_count, max(w.last_seen_at) AS last_seen_at
  FROM pr CROSS JOIN LATERAL (VALUES {rows}) AS w (window_days, n, last_seen_at)
  GROUP BY pr.pattern_key, pr.status, w.window_days
  HAVING sum(w.n) > 0
),
upserted AS (
  INSERT INTO infestation_pattern_status_windows AS sw
    (pattern_key, status, window_days, repo_count, instance_count, last_seen_at)
  SELECT pattern_key, status, window_days, repo_count, instance_count, last_seen_at FROM agg
  ON CONFLICT (pattern_key, status, window_days) DO UPDATE
    SET (repo_count, instance_count, last_seen_at) = (EXCLUDED.repo_count, EXCLUDED.instance_count,
                                                      EXCLUDED.last_seen_at)
  WHERE (sw.repo_count, sw.instance_count, sw.last_seen_at)
    IS DISTINCT FROM (EXCLUDED.repo_count, EXCLUDED.instance_count, EXCLUDED.last_seen_at)
  RETURNING 1
)
DELETE FROM infestation_pattern_status_windows sw
WHERE {keys_sw}
  AND NOT EXISTS (SELECT 1 FROM agg WHERE agg.pattern_key = sw.pattern_key AND agg.status = sw.status
                                      AND agg.window_days = sw.window_days)
""",
        per_repository=per_repository,
        keys_i=_keys(shape, "i"),
        rows=rows,
        keys_sw=_keys(shape, "sw"),
    )


def _inside(window: Window) -> ColumnElement[bool]:
    return column("updated_at") >= window.since


_PROJECTION_TABLES = (
    "infestation_pattern_instances",
    "infestation_pattern_repos",
    "infestation_pattern_status_windows",
    "infestation_patterns",
)


_DELETE_PROJECTION = [
    statement("DELETE FROM {table} WHERE pattern_key = :key", table=Name(table)) for table in _PROJECTION_TABLES
]


async def _delete_projection(session: AsyncSession, key: str) -> None:
    for delete in _DELETE_PROJECTION:
        await session.execute(delete, {"key": key})


async def refresh_pattern(
    pattern_key: str, *, reason: str = "manual", repositories: tuple[int, ...] | None = None
) -> int:
    """Recompute one key's instances, memberships, pattern row and status windows from source, in one transaction.

    `repositories` (the dirty-key queue's scope, docs/domain.md §5.2 "Scoped refresh"): only the key's rows in these
    repositories changed, so only their instances and memberships are re-projected from source; the pattern row and
    status windows are then re-aggregated from the key's instance rows as in the full refresh, so the result is the
    same. A key without a pattern row yet is refreshed in full.

    Returns the number of instances the key now has (its public join set); 0 means the key left the public join
    set and its projection was hard-deleted (its show page then 404s). Serialized per key by a transaction-scoped
    advisory lock. Only rows that really changed are written (the pattern row always is: `refreshed_at`)."""
    started = time.perf_counter()
    scope = "key"
    try:
        async with db.transaction() as session:
            await session.execute(text(_LOCK_KEY), _lock_key_params(pattern_key))
            if repositories is not None and await _projected(session, pattern_key):
                scope = "repositories"
                instances = await _refresh_scoped(session, Keys(key=pattern_key, repositories=repositories))
            else:
                keys = Keys(key=pattern_key)
                synced = (await session.execute(_sync_instances(keys.shape), keys.params)).mappings().one()
                instances = int(synced["instances"])
                if instances == 0:
                    await _delete_projection(session, pattern_key)
                else:
                    await _project_from_instances(session, keys)
    except Exception:
        REFRESH_ERRORS.inc()
        raise
    REFRESH_DURATION.labels(reason=reason).observe(time.perf_counter() - started)
    REFRESH_INSTANCES.labels(reason=reason).observe(instances)
    REFRESH_SCOPES.labels(scope=scope).inc()
    return instances


async def _projected(session: AsyncSession, key: str) -> bool:
    found = await session.execute(text("SELECT 1 FROM infestation_patterns WHERE pattern_key = :key"), {"key": key})
    return found.first() is not None


async def _refresh_scoped(session: AsyncSession, scoped: Keys) -> int:
    """The scoped refresh's statements: the same as the full refresh's, with the source sync and the memberships
    limited to the scope's repositories and the key-wide aggregates over the key. Returns the key's instances."""
    assert scoped.key is not None
    await session.execute(_sync_instances(scoped.shape), scoped.params)
    await session.execute(_upsert_memberships(scoped.shape), scoped.params)
    await session.execute(_delete_stale_memberships(scoped.shape), scoped.params)
    key = Keys(key=scoped.key)
    patterns = await session.execute(_upsert_patterns_returning(key.shape), key.params)
    instances = patterns.scalar()
    if instances is None:  # the scope's rows were the key's last ones
        await _delete_projection(session, scoped.key)
        return 0
    await session.execute(_sync_status_windows(key.shape), key.params)
    return int(instances)


@cache
def _upsert_patterns_returning(shape: str) -> TextClause:
    return statement("{upsert} RETURNING p.instance_count", upsert=_upsert_patterns_sql(shape))


async def _project_from_instances(session: AsyncSession, keys: Keys) -> int:
    """Memberships, pattern rows and status windows of `keys` from their (already synced) instance rows; keys
    without instances lose them. Returns the pattern rows written."""
    params = keys.params
    await session.execute(_upsert_memberships(keys.shape), params)
    await session.execute(_delete_stale_memberships(keys.shape), params)
    patterns = await session.execute(_upsert_patterns(keys.shape), params)
    await session.execute(_delete_stale_patterns(keys.shape), params)
    await session.execute(_sync_status_windows(keys.shape), params)
    return int(patterns.rowcount or 0)  # type: ignore[attr-defined]


async def recompute_windows(pattern_key: str) -> None:
    """Hourly window decay for one key from the instance table only (no source join, docs/domain.md §5.4): the
    window columns and the status windows. `updated_at` is left alone: it moves only with a refresh from source,
    which the hot-key cap reads (§5.5).

    No instances left (e.g. a hard repository delete cascaded them away) -> the key's projection is deleted;
    instances without a pattern row -> a full `refresh_pattern`."""
    keys = Keys(key=pattern_key)
    async with db.transaction() as session:
        await session.execute(text(_LOCK_KEY), _lock_key_params(pattern_key))
        updated = await session.execute(_update_windows(keys.shape), keys.params)
        if int(updated.rowcount or 0) == 1:  # type: ignore[attr-defined]
            await session.execute(_sync_status_windows(keys.shape), keys.params)
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


# ---- key ranges (set-based backfill and window recompute, docs/domain.md §13 "Backfill") ------------------------


def key_ranges(count: int) -> list[Keys]:
    """`count` (at most 256) ranges covering every key, split on the first two hex digits (keys are sha256 hex, so
    uniform): the first is open below and the last open above, so any key, hex or not, falls into exactly one."""
    count = max(1, min(count, 256))
    bounds = [f"{i * 256 // count:02x}" for i in range(1, count)]
    highs: list[str | None] = [*bounds, None]
    return [Keys(lo=lo, hi=hi) for lo, hi in zip(["", *bounds], highs, strict=True)]


def _buckets(keys: Keys) -> list[str]:
    """The lock buckets a range spans, ascending ("other" first: the first and last ranges hold non-hex keys)."""
    first = int(keys.lo, 16) if keys.lo else 0
    last = int(keys.hi, 16) if keys.hi is not None else 256
    edge = [_OTHER] if not keys.lo or keys.hi is None else []
    return [*edge, *(f"{b:02x}" for b in range(first, last))]


async def _lock_range(session: AsyncSession, keys: Keys) -> None:
    await session.execute(text(_RANGE_WORK_MEM))
    await session.execute(text(_LOCK_BUCKETS), {"buckets": _buckets(keys)})


async def project_range(keys: Keys) -> tuple[int, int]:
    """Every key in the range projected from source in one transaction and a few statements (the set-based
    backfill): the same statements as `refresh_pattern`, over the range. Keys of the range without public
    instances lose their projection (so orphans go too). Returns (instances, patterns)."""
    async with db.transaction() as session:
        await _lock_range(session, keys)
        synced = (await session.execute(_sync_instances(keys.shape), keys.params)).mappings().one()
        patterns = await _project_from_instances(session, keys)
    return int(synced["instances"]), patterns


async def recompute_range(keys: Keys) -> int:
    """`recompute_windows` for every pattern row of the range at once: window columns and status windows from the
    instances; a pattern row left without instances loses its projection. Returns the pattern rows updated."""
    async with db.transaction() as session:
        await _lock_range(session, keys)
        updated = await session.execute(_update_windows(keys.shape), keys.params)
        await session.execute(_sync_status_windows(keys.shape), keys.params)
        await session.execute(_delete_stale_patterns_and_memberships(keys.shape), keys.params)
    return int(updated.rowcount or 0)  # type: ignore[attr-defined]
