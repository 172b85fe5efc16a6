"""Legacy online reads of the atlas: the public join set aggregated at query time, the semantic reference of the
rollups and the flag-off path (docs/domain.md §4, §11)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, LiteralString

from sqlalchemy import ARRAY, ColumnElement, Text, and_, any_, bindparam, cast, literal, true

from app.infestations.models import UNKNOWN_TITLE, status_rank
from app.infestations.rows import (
    InfestationFilters,
    infestation_map,
    instance_entry,
    membership_entry,
    newest_first_page,
    window_bucket,
    with_repository_share,
)
from app.kernel import db
from app.kernel.metrics import LIST_DURATION
from app.kernel.paging import Page, Pages, after_keyset
from app.kernel.sql import Fragment, Slot, compose, outer, statement
from app.record.public import public_canonical, public_occurrence, public_scan, published_occurrence

# One row per canonical in the public join set (§3), narrowed by `{where}`. EXISTS instead of joining occurrences:
# a canonical with many public occurrences must count once, and the distinct counts then stay cheap.
_PUBLIC_CANONICALS = """
SELECT c.id, c.pattern_key, c.repository_id, c.status, c.inserted_at, c.updated_at
FROM canonical_findings c
JOIN repositories r ON r.id = c.repository_id
WHERE {public} AND c.pattern_key IS NOT NULL AND c.pattern_key <> '' AND {where}
"""

_AGGREGATES = Fragment("""
COUNT(DISTINCT repository_id) AS repo_count,
COUNT(DISTINCT id) AS instance_count,
COUNT(DISTINCT id) FILTER (WHERE status = 'open') AS open_count,
COUNT(DISTINCT id) FILTER (WHERE status = 'verified') AS verified_count,
COUNT(DISTINCT id) FILTER (WHERE status = 'fixed') AS fixed_count,
COUNT(DISTINCT id) FILTER (WHERE status = 'disputed') AS disputed_count,
MAX(updated_at) AS last_seen_at,
MIN(inserted_at) AS first_seen_at
""")


def _public_canonicals(where: Slot) -> Fragment:
    return compose(_PUBLIC_CANONICALS, public=public_canonical(), where=where)


_LIST_SQL = """
WITH pc AS ({canonicals})
SELECT pattern_key, {aggregates}
FROM pc
GROUP BY pattern_key
HAVING COUNT(DISTINCT repository_id) >= :min_repos
ORDER BY repo_count DESC, last_seen_at DESC, pattern_key ASC
LIMIT :limit
"""


def list_sql(*, status_filter: bool) -> Fragment:
    """The legacy ranked list: canonicals updated since `:since`, optionally of status `:status`."""
    since = outer("c.updated_at") >= bindparam("since")
    where = and_(since, outer("c.status") == bindparam("status")) if status_filter else since
    return compose(_LIST_SQL, canonicals=_public_canonicals(where), aggregates=_AGGREGATES)


_LIST = {status_filter: list_sql(status_filter=status_filter).statement() for status_filter in (False, True)}

_GET = statement(
    "WITH pc AS ({canonicals}) SELECT pattern_key, {aggregates} FROM pc GROUP BY pattern_key",
    canonicals=_public_canonicals(outer("c.pattern_key") == bindparam("key")),
    aggregates=_AGGREGATES,
)

# Representative (§4.2, leak fixed): among the key's public-join canonicals, open-preferring, then newest;
# its sample is its newest public occurrence.
_REPRESENTATIVES = statement(
    """
WITH rep AS (
  SELECT DISTINCT ON (c.pattern_key) c.pattern_key, c.id, c.title, c.severity, c.file_path
  FROM canonical_findings c
  JOIN repositories r ON r.id = c.repository_id
  WHERE c.pattern_key = ANY(CAST(:keys AS text[])) AND {public}
  ORDER BY c.pattern_key, {rank}, c.updated_at DESC, c.id DESC
)
SELECT rep.pattern_key, rep.title, rep.severity, rep.file_path AS sample_file_path,
       sample.public_id AS sample_occurrence_public_id
FROM rep
LEFT JOIN LATERAL (
  SELECT f.public_id FROM scan_findings f JOIN scans s ON s.id = f.scan_id
  WHERE f.canonical_finding_id = rep.id AND {public_scan}
  ORDER BY s.inserted_at DESC, f.id DESC
  LIMIT 1
) sample ON true
""",
    public=public_canonical(),
    rank=status_rank(outer("c.status")),
    public_scan=and_(published_occurrence(), public_scan()),
)


def _by_cursor(template: LiteralString, *keyset: ColumnElement[Any], **slots: Slot) -> Pages:
    """`template`'s `{after}` slot filled for the first page and for the pages after a cursor."""
    first, after = statement(template, after=true(), **slots), statement(template, after=after_keyset(*keyset), **slots)
    return {False: first, True: after}


# Newest public occurrence per canonical (DISTINCT ON), then the ledger order: newest canonical first.
_INSTANCES = _by_cursor(
    """
WITH rows AS (
  SELECT DISTINCT ON (c.id)
    c.id, c.public_id, f.public_id AS occurrence_public_id, c.status, c.severity, c.title, c.file_path,
    c.detections_count, c.confirmations_count, r.host, r.owner, r.name, c.repository_id,
    pr.opaque_id AS repository_uuid, s.commit_sha, s.id AS scan_id, c.updated_at
  FROM canonical_findings c
  JOIN repositories r ON r.id = c.repository_id
  JOIN scan_findings f ON f.canonical_finding_id = c.id
  JOIN scans s ON s.id = f.scan_id
  LEFT JOIN published_repositories pr ON pr.repository_id = c.repository_id
  WHERE c.pattern_key = :key AND {public}
  ORDER BY c.id, s.inserted_at DESC, f.id DESC
)
SELECT * FROM rows
WHERE {after}
ORDER BY updated_at DESC, id DESC
LIMIT :fetch
""",
    outer("rows.updated_at"),
    outer("rows.id"),
    public=public_occurrence(),
)


async def _representatives(keys: Sequence[str]) -> dict[str, Mapping[Any, Any]]:
    if not keys:
        return {}
    async with db.read_session() as session:
        rows = (await session.execute(_REPRESENTATIVES, {"keys": list(keys)})).mappings().all()
    return {row["pattern_key"]: row for row in rows}


def _merge(aggregate: Mapping[Any, Any], rep: Mapping[Any, Any] | None) -> dict[str, Any]:
    return infestation_map({**aggregate, **({k: v for k, v in rep.items() if k != "pattern_key"} if rep else {})})


async def list_infestations_legacy(
    *, days: int = 30, min_repos: int = 2, status: str | None = None, limit: int = 40
) -> list[dict[str, Any]]:
    """`ranked_legacy` of the clamped filters."""
    filters = InfestationFilters.of(days=days, min_repos=min_repos, status=status, limit=limit, rollup=False)
    return await ranked_legacy(filters)


async def ranked_legacy(options: InfestationFilters) -> list[dict[str, Any]]:
    """Online GROUP BY over the public join set: canonicals updated within `days` (exact `since`), optional
    pre-aggregate status filter, at least `min_repos` distinct repositories. Counts and dates are window-scoped."""
    started = time.perf_counter()
    since = db.utcnow() - timedelta(days=options.days)
    params: dict[str, Any] = {"since": since, "min_repos": options.min_repos, "limit": options.limit}
    if options.status_filter is not None:
        params["status"] = options.status_filter
    async with db.read_session() as session:
        rows = (await session.execute(_LIST[options.status_filter is not None], params)).mappings().all()
    reps = await _representatives([row["pattern_key"] for row in rows])
    window = window_bucket(options.days)
    LIST_DURATION.labels(source="legacy", window=str(window)).observe(time.perf_counter() - started)
    return [_merge(row, reps.get(row["pattern_key"])) for row in rows]


async def get_infestation_legacy(pattern_key: str) -> dict[str, Any] | None:
    """All-time aggregate of one key over the public join set; None when nothing public remains."""
    if not pattern_key:
        return None
    async with db.read_session() as session:
        row = (await session.execute(_GET, {"key": pattern_key})).mappings().first()
    if row is None:
        return None
    reps = await _representatives([pattern_key])
    return _merge(row, reps.get(pattern_key))


async def list_instances_legacy(
    pattern_key: str, *, limit: int = 50, cursor: str | None = None
) -> Page[dict[str, Any]]:
    """The key's public-join canonicals newest-first, each with its newest public occurrence (commit, scan).
    Returns `{"entries", "next_cursor"}`; the caller clamps `limit`."""
    return await newest_first_page(_INSTANCES, pattern_key, limit=limit, cursor=cursor, entry=instance_entry)


# The key's public-join canonicals, each with its newest public occurrence (what the projection's instance rows
# hold), narrowed by `{where}`.
_INSTANCE_SOURCE = """
SELECT DISTINCT ON (c.id) c.id, c.pattern_key, c.repository_id, c.status, c.severity,
  COALESCE(NULLIF(c.title, ''), {unknown}) AS title, c.inserted_at, c.updated_at,
  f.public_id AS occurrence_public_id
FROM canonical_findings c
JOIN repositories r ON r.id = c.repository_id
JOIN scan_findings f ON f.canonical_finding_id = c.id
JOIN scans s ON s.id = f.scan_id
WHERE {where} AND {public}
ORDER BY c.id, s.inserted_at DESC, f.id DESC
"""

# Memberships computed live, as the projection derives them from the instances (docs/domain.md §5.2 step 4).
_MEMBERSHIPS = """
WITH inst AS ({instances}),
agg AS (
  SELECT pattern_key, repository_id, count(*) AS instance_count,
    count(*) FILTER (WHERE status = 'open') AS open_count,
    count(*) FILTER (WHERE status = 'verified') AS verified_count,
    count(*) FILTER (WHERE status = 'disputed') AS disputed_count,
    max(updated_at) AS last_seen_at
  FROM inst GROUP BY pattern_key, repository_id
),
rep AS (
  SELECT DISTINCT ON (pattern_key, repository_id) pattern_key, repository_id, severity, title, occurrence_public_id
  FROM inst ORDER BY pattern_key, repository_id, {rank}, updated_at DESC, id DESC
)
SELECT agg.repository_id AS id, agg.repository_id, agg.pattern_key, r.host, r.owner, r.name,
  CASE WHEN agg.open_count > 0 THEN 'open' WHEN agg.disputed_count > 0 THEN 'disputed'
       WHEN agg.verified_count > 0 THEN 'verified' ELSE 'fixed' END AS status,
  rep.severity, rep.title, agg.instance_count, agg.open_count, rep.occurrence_public_id,
  agg.last_seen_at AS updated_at
FROM agg JOIN rep USING (pattern_key, repository_id) JOIN repositories r ON r.id = agg.repository_id
"""


def _memberships(where: Slot) -> Fragment:
    instances = compose(_INSTANCE_SOURCE, unknown=literal(UNKNOWN_TITLE), where=where, public=public_occurrence())
    return compose(_MEMBERSHIPS, instances=instances, rank=status_rank(outer("inst.status")))


_PATTERN_REPOS = _by_cursor(
    """
SELECT id, repository_id,
       (SELECT pr.opaque_id FROM published_repositories pr WHERE pr.repository_id = x.repository_id) AS repository_uuid,
       host, owner, name, status, severity, title, instance_count, open_count, occurrence_public_id, updated_at
FROM ({memberships}) x
WHERE {after}
ORDER BY updated_at DESC, id DESC
LIMIT :fetch
""",
    outer("x.updated_at"),
    outer("x.id"),
    memberships=_memberships(outer("c.pattern_key") == bindparam("key")),
)


async def list_pattern_repos_legacy(
    pattern_key: str | None, *, limit: int = 64, cursor: str | None = None
) -> Page[dict[str, Any]]:
    """The graph's repositories computed from source (the flag-off path): same entries, order and cursor as the
    membership read."""
    return await newest_first_page(_PATTERN_REPOS, pattern_key, limit=limit, cursor=cursor, entry=membership_entry)


_REPOSITORY_SHARES = _memberships(
    and_(
        outer("c.repository_id") == bindparam("repository_id"),
        outer("c.pattern_key").is_not(None),
        outer("c.pattern_key") != "",
    )
).statement()

_KEYS_AGGREGATE = statement(
    """
WITH pc AS ({canonicals})
SELECT pattern_key, {aggregates} FROM pc GROUP BY pattern_key
HAVING COUNT(DISTINCT repository_id) >= :min_repos
ORDER BY repo_count DESC, pattern_key ASC
LIMIT :limit
""",
    canonicals=_public_canonicals(outer("c.pattern_key") == any_(cast(bindparam("keys"), ARRAY(Text)))),
    aggregates=_AGGREGATES,
)


async def list_repository_infestations_legacy(
    repository_id: int, *, limit: int, min_repos: int
) -> list[dict[str, Any]]:
    """Patterns one repository takes part in, computed from source (the flag-off path): each the all-time map plus
    the repository's share, in the rollup read's order."""
    async with db.read_session() as session:
        shares = (await session.execute(_REPOSITORY_SHARES, {"repository_id": repository_id})).mappings().all()
        by_key = {row["pattern_key"]: row for row in shares}
        params = {"keys": sorted(by_key), "min_repos": min_repos, "limit": limit}
        rows = (await session.execute(_KEYS_AGGREGATE, params)).mappings().all() if by_key else []
    reps = await _representatives([row["pattern_key"] for row in rows])
    items = []
    for row in rows:
        share = by_key[row["pattern_key"]]
        item = _merge(row, reps.get(row["pattern_key"]))
        items.append(with_repository_share(item, share, prefix=""))
    return items


_NEWEST = statement(
    """
WITH pc AS ({canonicals})
SELECT pattern_key, {aggregates} FROM pc GROUP BY pattern_key
HAVING COUNT(DISTINCT repository_id) >= 2
ORDER BY first_seen_at DESC, pattern_key
LIMIT :limit
""",
    canonicals=_public_canonicals(true()),
    aggregates=_AGGREGATES,
)


async def list_newest_infestations_legacy(*, limit: int) -> list[dict[str, Any]]:
    """All-time infestations by first sighting, newest first, computed from source (the flag-off feed)."""
    async with db.read_session() as session:
        rows = (await session.execute(_NEWEST, {"limit": limit})).mappings().all()
    reps = await _representatives([row["pattern_key"] for row in rows])
    return [_merge(row, reps.get(row["pattern_key"])) for row in rows]
