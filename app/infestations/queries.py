"""Read APIs of the infestation atlas (docs/domain.md §13 "Read APIs", docs/domain.md §5.7).

The atlas reads the rollup tables the projection keeps: the ranked list walks one partial rank index per window
(O(limit)), the show page reads one pattern row plus keyset pages of instances and memberships. The legacy online
aggregate (app.infestations.legacy) stays the semantic reference and the flag-off path of `list_infestations`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from sqlalchemy import text

from app.infestations.legacy import (
    STATUSES,
    clamp,
    clamp_list_options,
    get_infestation_legacy,
    infestation_map,
    instance_entry,
    list_infestations_legacy,
    list_instances_legacy,
    newest_first_page,
    uuid_str,
    window_bucket,
)
from app.kernel import config, db
from app.kernel.metrics import LIST_DURATION
from app.kernel.paging import Page

__all__ = [
    "get_infestation",
    "get_infestation_legacy",
    "list_infestations",
    "list_infestations_legacy",
    "list_infestations_rollup",
    "list_instances",
    "list_instances_legacy",
    "list_instances_page",
    "list_pattern_repos_page",
    "list_repository_infestations",
    "parse_pattern_key",
    "window_bucket",
]

LIST_INSTANCES_MAX = 300  # production parity for list consumers (swarm checks take 200)
PAGE_MAX = 100  # UI pages: ledger and graph satellites

_PATTERN_KEY = re.compile(r"[0-9a-f]{64}")


def parse_pattern_key(raw: object) -> str | None:
    """A pattern key is 64 lowercase hex characters (sha256); anything else is None (the routes answer 404)."""
    if isinstance(raw, str) and _PATTERN_KEY.fullmatch(raw):
        return raw
    return None


async def list_infestations(
    *, days: int = 30, min_repos: int = 2, status: str | None = None, limit: int = 40
) -> list[dict[str, Any]]:
    """The ranked atlas. Reads the runtime flag at every call, so operators can fall back to the legacy
    online aggregate without a restart."""
    if config.read_from_rollup():
        return await list_infestations_rollup(days=days, min_repos=min_repos, status=status, limit=limit)
    return await list_infestations_legacy(days=days, min_repos=min_repos, status=status, limit=limit)


def _window_columns(window: int) -> str:
    # `window` is one of four ints from window_bucket(), never user text
    return ", ".join(
        [
            f"repo_count_{window}d AS repo_count",
            f"instance_count_{window}d AS instance_count",
            f"open_count_{window}d AS open_count",
            f"verified_count_{window}d AS verified_count",
            f"fixed_count_{window}d AS fixed_count",
            f"disputed_count_{window}d AS disputed_count",
            f"last_seen_at_{window}d AS last_seen_at",
        ]
    )


# The literal `>= 2` repeats the rank index predicate so the planner can always prove the partial index applies
# (min_repos is clamped to >= 2, so it never changes the result). The `last_seen_at_Wd >= :since` guard drops a
# pattern whose newest in-window instance has left the window before the hourly recompute catches up.
_RANKED_SQL = """
SELECT pattern_key, title, severity, sample_file_path, sample_occurrence_public_id, first_seen_at, {columns}
FROM infestation_patterns
WHERE repo_count_{w}d >= 2 AND repo_count_{w}d >= :min_repos AND last_seen_at_{w}d >= :since
ORDER BY repo_count_{w}d DESC, last_seen_at_{w}d DESC NULLS LAST, pattern_key ASC
LIMIT :limit
"""

# Status filter: live aggregate over the instance grain (no window-column lag), representative fields from the
# pattern row.
_STATUS_SQL = """
WITH agg AS (
  SELECT pattern_key,
         COUNT(DISTINCT repository_id) AS repo_count,
         COUNT(*) AS instance_count,
         MAX(updated_at) AS last_seen_at,
         MIN(inserted_at) AS first_seen_at
  FROM infestation_pattern_instances
  WHERE status = :status AND updated_at >= :since
  GROUP BY pattern_key
  HAVING COUNT(DISTINCT repository_id) >= :min_repos
  ORDER BY repo_count DESC, last_seen_at DESC, pattern_key ASC
  LIMIT :limit
)
SELECT agg.*, p.title, p.severity, p.sample_file_path, p.sample_occurrence_public_id
FROM agg
LEFT JOIN infestation_patterns p ON p.pattern_key = agg.pattern_key
ORDER BY agg.repo_count DESC, agg.last_seen_at DESC, agg.pattern_key ASC
"""


def ranked_list_sql(window: int) -> str:
    """The ranked-list statement for one window bucket (tests EXPLAIN it to prove the rank index is used)."""
    if window not in (7, 30, 90, 365):
        raise ValueError(f"no precomputed window of {window} days")
    return _RANKED_SQL.format(columns=_window_columns(window), w=window)


async def list_infestations_rollup(
    *, days: int = 30, min_repos: int = 2, status: str | None = None, limit: int = 40
) -> list[dict[str, Any]]:
    """Rollup path: counts and last_seen_at from the window bucket covering `days`, first_seen_at all-time
    (docs/domain.md §5.7). For `days` between buckets the counts are the bucket's; the guard uses the real `days`."""
    days, min_repos, limit, status = clamp_list_options(days=days, min_repos=min_repos, limit=limit, status=status)
    window = window_bucket(days)
    since = db.utcnow() - timedelta(days=days)
    started = time.perf_counter()
    async with db.read_session() as session:
        if status is None:
            sql = ranked_list_sql(window)
            params: dict[str, Any] = {"min_repos": min_repos, "since": since, "limit": limit}
        else:
            sql = _STATUS_SQL
            params = {"status": status, "min_repos": min_repos, "since": since, "limit": limit}
        rows = (await session.execute(text(sql), params)).mappings().all()
    LIST_DURATION.labels(source="rollup", window=str(window)).observe(time.perf_counter() - started)
    items = []
    for row in rows:
        item = dict(row)
        if status is not None:
            for other in STATUSES:
                item[f"{other}_count"] = row["instance_count"] if other == status else 0
        items.append(infestation_map(item))
    return items


_GET_SQL = """
SELECT pattern_key, title, severity, sample_file_path, sample_occurrence_public_id, repo_count, instance_count,
       open_count, verified_count, fixed_count, disputed_count, last_seen_at, first_seen_at
FROM infestation_patterns WHERE pattern_key = :key
"""


async def get_infestation(pattern_key: str) -> dict[str, Any] | None:
    """All-time map of one pattern from its rollup row; None when there is no row (the show page 404s).
    Deliberately no legacy fallback: an emptied pattern is hard-deleted and must stay gone."""
    key = parse_pattern_key(pattern_key)
    if key is None:
        return None
    async with db.read_session() as session:
        row = (await session.execute(text(_GET_SQL), {"key": key})).mappings().first()
    return None if row is None else infestation_map(row)


_INSTANCES_SQL = """
SELECT i.canonical_finding_id AS id, c.public_id, i.sample_occurrence_public_id AS occurrence_public_id,
       i.status, i.severity, i.title, i.file_path, c.detections_count, c.confirmations_count,
       r.host, r.owner, r.name, i.repository_id, i.sample_commit_sha AS commit_sha, i.sample_scan_id AS scan_id,
       i.updated_at
FROM infestation_pattern_instances i
JOIN repositories r ON r.id = i.repository_id
JOIN canonical_findings c ON c.id = i.canonical_finding_id
WHERE i.pattern_key = :key AND {after}
ORDER BY i.updated_at DESC, i.canonical_finding_id DESC
LIMIT :fetch
"""


async def _fetch_instances(pattern_key: str, *, limit: int, cursor: str | None) -> Page[dict[str, Any]]:
    return await newest_first_page(
        _INSTANCES_SQL,
        "(i.updated_at, i.canonical_finding_id)",
        parse_pattern_key(pattern_key),
        limit=limit,
        cursor=cursor,
        entry=instance_entry,
    )


async def list_instances(pattern_key: str, *, limit: int = 100) -> list[dict[str, Any]]:
    """Newest-first instances of a pattern as a plain list (default 100, max 300): for list consumers such as
    swarm checks. Not built on list_instances_page, whose cap of 100 would starve them."""
    page = await _fetch_instances(pattern_key, limit=clamp(limit, 1, LIST_INSTANCES_MAX), cursor=None)
    return page["entries"]


async def list_instances_page(pattern_key: str, *, limit: int = 50, cursor: str | None = None) -> Page[dict[str, Any]]:
    """One ledger page `{"entries", "next_cursor"}` (default 50, max 100), keyset on
    `(updated_at DESC, canonical id DESC)`. A malformed cursor raises InvalidCursor (400)."""
    return await _fetch_instances(pattern_key, limit=clamp(limit, 1, PAGE_MAX), cursor=cursor)


_REPOS_SQL = """
SELECT m.repository_id AS id, m.repository_id, r.host, r.owner, r.name, m.primary_status AS status, m.severity,
       m.title, m.instance_count, m.open_count, m.sample_occurrence_public_id AS occurrence_public_id,
       m.last_seen_at AS updated_at
FROM infestation_pattern_repos m
JOIN repositories r ON r.id = m.repository_id
WHERE m.pattern_key = :key AND {after}
ORDER BY m.last_seen_at DESC, m.repository_id DESC
LIMIT :fetch
"""


async def list_pattern_repos_page(
    pattern_key: str, *, limit: int = 64, cursor: str | None = None
) -> Page[dict[str, Any]]:
    """Repositories affected by a pattern, most recently seen first (default 64 = the graph's satellites,
    max 100), keyset on `(last_seen_at DESC, repository_id DESC)`."""
    return await newest_first_page(
        _REPOS_SQL,
        "(m.last_seen_at, m.repository_id)",
        parse_pattern_key(pattern_key),
        limit=clamp(limit, 1, PAGE_MAX),
        cursor=cursor,
        entry=_membership_entry,
    )


def _membership_entry(row: Mapping[Any, Any]) -> dict[str, Any]:
    return {**row, "occurrence_public_id": uuid_str(row["occurrence_public_id"])}


_REPOSITORY_INFESTATIONS_SQL = """
SELECT p.pattern_key, p.title, p.severity, p.sample_file_path, p.sample_occurrence_public_id, p.repo_count,
       p.instance_count, p.open_count, p.verified_count, p.fixed_count, p.disputed_count, p.last_seen_at,
       p.first_seen_at,
       m.instance_count AS repository_instance_count, m.open_count AS repository_open_count,
       m.primary_status AS repository_status, m.sample_occurrence_public_id AS repository_occurrence_public_id
FROM infestation_pattern_repos m
JOIN infestation_patterns p ON p.pattern_key = m.pattern_key
WHERE m.repository_id = :repository_id AND p.repo_count >= :min_repos
ORDER BY p.repo_count DESC, p.pattern_key ASC
LIMIT :limit
"""


async def list_repository_infestations(
    repository_id: int, *, limit: int = 50, min_repos: int = 1
) -> list[dict[str, Any]]:
    """Patterns one repository takes part in, widest spread first (max 100; `min_repos=2` keeps only patterns
    shared with other repositories). Each item is the pattern's all-time infestation map plus this repository's
    share: `repository_instance_count`, `repository_open_count`, `repository_status` and
    `repository_occurrence_public_id`."""
    params = {
        "repository_id": int(repository_id),
        "limit": clamp(limit, 1, PAGE_MAX),
        "min_repos": clamp(min_repos, 1, 50),
    }
    async with db.read_session() as session:
        rows = (await session.execute(text(_REPOSITORY_INFESTATIONS_SQL), params)).mappings().all()
    items = []
    for row in rows:
        item = infestation_map(row)
        item["repository_instance_count"] = int(row["repository_instance_count"])
        item["repository_open_count"] = int(row["repository_open_count"])
        item["repository_status"] = row["repository_status"]
        item["repository_occurrence_public_id"] = uuid_str(row["repository_occurrence_public_id"])
        items.append(item)
    return items
