"""The projection's statements (docs/domain.md §5.2-§5.6), each written once over a set of keys (`Keys`: one key,
its rows in some repositories, several keys, several keys' rows in some repositories each, or a key range) and built
once per shape."""

from __future__ import annotations

from functools import cache

from sqlalchemy import ColumnElement, TextClause, and_, column, literal

from app.infestations.keys import rows_of_keys
from app.infestations.models import COUNTS, UNKNOWN_TITLE, WINDOWED_AGGREGATES, status_rank
from app.kernel.sql import WINDOW_DAYS, Fragment, Name, Window, compose, join, names, statement
from app.record.public import listed_repository, public_scan, published_occurrence
from app.reports.models import CANONICAL_STATUSES

# The representative instance: open-preferring, then newest (docs/domain.md §4.2).
_REPRESENTATIVE_ORDER = compose(
    "{rank}, updated_at DESC, canonical_finding_id DESC", rank=status_rank(column("status"))
)


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
def sync_instances(shape: str) -> TextClause:
    """The keys' instance rows synced with the public join set, one per canonical with its newest public occurrence
    as the sample: changed rows updated, departed ones deleted, a re-keyed canonical's row moved (domain.md §5.2)."""
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
  -- a set difference, not NOT EXISTS against the CTE: an anti-join is planned from the instance table's statistics,
  -- and a key grown since they were taken was joined as a nested loop over the CTE, quadratic (docs/domain.md §5.2)
  DELETE FROM infestation_pattern_instances d
  USING (SELECT i.canonical_finding_id FROM infestation_pattern_instances i WHERE {keys_i}
         EXCEPT SELECT canonical_finding_id FROM src) gone
  WHERE d.canonical_finding_id = gone.canonical_finding_id
  RETURNING 1
)
SELECT (SELECT count(*) FROM src) AS instances, (SELECT count(*) FROM upserted) AS written,
       (SELECT count(*) FROM removed) AS removed
""",
        public=and_(published_occurrence(), public_scan()),
        unknown=literal(UNKNOWN_TITLE),
        listed=listed_repository(),
        keys_c=rows_of_keys(shape, "c"),
        keys_i=rows_of_keys(shape, "i"),
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
def upsert_memberships(shape: str) -> TextClause:
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
        keys=rows_of_keys(shape, "i"),
        order=_REPRESENTATIVE_ORDER,
        columns=names(_MEMBERSHIP_COLUMNS),
        existing=names(_MEMBERSHIP_COLUMNS, prefix="m"),
        excluded=_excluded(_MEMBERSHIP_COLUMNS),
    )


@cache
def delete_stale_memberships(shape: str) -> TextClause:
    """Memberships of the keys left without instances in their repository: a set difference, the keys' predicate on
    every side (docs/domain.md §13 "Recompute algorithm")."""
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
        keys_m=rows_of_keys(shape, "m"),
        keys_i=rows_of_keys(shape, "i"),
        keys_e=rows_of_keys(shape, "e"),
    )


def _window_columns() -> list[str]:
    return [f"{name}_{w}d" for w in WINDOW_DAYS for name in WINDOWED_AGGREGATES]


def _status_value(status: str) -> ColumnElement[bool]:
    return column("status") == literal(status)


# window aggregates per (key, repository) first, then per key (docs/domain.md §13 "Recompute algorithm")
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
        keys=rows_of_keys(shape, "i"),
    )


def _window_aggregates() -> list[Fragment]:
    """`{name}_{W}d` of docs/domain.md §5.3, over the per-repository rows `pr`."""
    parts: list[Fragment] = []
    for w in map(Window, WINDOW_DAYS):
        parts += [
            compose("count(*) FILTER (WHERE pr.n_{w}d > 0)::int AS repo_count_{w}d", w=w),
            compose("sum(pr.n_{w}d)::int AS instance_count_{w}d", w=w),
            *(compose("sum(pr.{s}_n_{w}d)::int AS {s}_count_{w}d", s=Name(s), w=w) for s in CANONICAL_STATUSES),
            compose("max(pr.last_seen_at_{w}d) AS last_seen_at_{w}d", w=w),
        ]
    return parts


_ALL_TIME_COLUMNS = [*COUNTS, "first_seen_at", "last_seen_at"]
_ALL_TIME_AGGREGATES = [
    Fragment("count(*)::int AS repo_count"),
    Fragment("sum(pr.n)::int AS instance_count"),
    *(compose("sum(pr.{s}_n)::int AS {s}_count", s=Name(s)) for s in CANONICAL_STATUSES),
    Fragment("min(pr.first_seen_at) AS first_seen_at"),
    Fragment("max(pr.last_seen_at) AS last_seen_at"),
]
_REPRESENTATIVE_COLUMNS = ["title", "severity", "sample_file_path", "sample_occurrence_public_id"]
_PATTERN_COLUMNS = [*_REPRESENTATIVE_COLUMNS, *_ALL_TIME_COLUMNS, *_window_columns(), "refreshed_at"]


@cache
def upsert_patterns(shape: str) -> TextClause:
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
        keys=rows_of_keys(shape, "i"),
        order=_REPRESENTATIVE_ORDER,
        assigned=_assigned(_PATTERN_COLUMNS, _EXCLUDED),
    )


@cache
def delete_stale_patterns(shape: str) -> TextClause:
    """Pattern rows of the keys without instances (the keys' predicate repeated on `i`, docs/domain.md §13)."""
    return _stale_patterns(shape).statement()


@cache
def delete_stale_patterns_and_memberships(shape: str) -> TextClause:
    return statement(
        """
WITH gone AS ({stale} RETURNING pattern_key)
DELETE FROM infestation_pattern_repos m USING gone WHERE m.pattern_key = gone.pattern_key
""",
        stale=_stale_patterns(shape),
    )


def _stale_patterns(shape: str) -> Fragment:
    return compose(_STALE_PATTERNS, keys_p=rows_of_keys(shape, "p"), keys_i=rows_of_keys(shape, "i"))


_STALE_PATTERNS = """
DELETE FROM infestation_patterns p
WHERE {keys_p}
  AND NOT EXISTS (SELECT 1 FROM infestation_pattern_instances i
                  WHERE i.pattern_key = p.pattern_key AND {keys_i})
"""


@cache
def update_windows(shape: str) -> TextClause:
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
        keys=rows_of_keys(shape, "p"),
    )


@cache
def sync_status_windows(shape: str) -> TextClause:
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
-- emptied rows: a set difference against the CTE, not NOT EXISTS (an anti-join over a CTE is planned blind, §5.2)
DELETE FROM infestation_pattern_status_windows sw
USING (SELECT s.pattern_key, s.status, s.window_days FROM infestation_pattern_status_windows s WHERE {keys_s}
       EXCEPT SELECT pattern_key, status, window_days FROM agg) gone
WHERE sw.pattern_key = gone.pattern_key AND sw.status = gone.status AND sw.window_days = gone.window_days
""",
        per_repository=per_repository,
        keys_i=rows_of_keys(shape, "i"),
        rows=rows,
        keys_s=rows_of_keys(shape, "s"),
    )


def _inside(window: Window) -> ColumnElement[bool]:
    return column("updated_at") >= window.since


_PROJECTION_TABLES = (
    "infestation_pattern_instances",
    "infestation_pattern_repos",
    "infestation_pattern_status_windows",
    "infestation_patterns",
)


@cache
def delete_projection(shape: str) -> tuple[TextClause, ...]:
    """Every row of the keys (`key` or `keys`), table by table: the keys left without instances."""
    return tuple(
        statement("DELETE FROM {table} d WHERE {keys}", table=Name(table), keys=rows_of_keys(shape, "d"))
        for table in _PROJECTION_TABLES
    )


@cache
def upsert_patterns_returning(shape: str) -> TextClause:
    """`upsert_patterns` returning each written key's instances (first) and key: a key of the set without a row
    returned has no instances left."""
    return statement("{upsert} RETURNING p.instance_count, p.pattern_key", upsert=_upsert_patterns_sql(shape))
