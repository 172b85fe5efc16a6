"""Read APIs of the infestation atlas (docs/domain.md §13 "Read APIs", docs/domain.md §5.7).

The atlas reads the rollup tables the projection keeps: the ranked list walks one partial rank index per window
(O(limit)), the show page reads one pattern row plus keyset pages of instances and memberships. The legacy online
aggregate (app.infestations.legacy) stays the semantic reference and the flag-off path of `list_infestations`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
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
    list_newest_infestations_legacy,
    list_pattern_repos_legacy,
    list_repository_infestations_legacy,
    membership_entry,
    newest_first_page,
    window_bucket,
    with_repository_share,
)
from app.kernel import config, db
from app.kernel.metrics import LIST_DURATION
from app.kernel.paging import Page
from app.kernel.public import shown_pattern, visible_occurrence, visible_scan

__all__ = [
    "get_infestation",
    "get_infestation_dated",
    "get_infestation_legacy",
    "list_infestations",
    "list_infestations_dated",
    "list_infestations_legacy",
    "list_infestations_rollup",
    "list_instances",
    "list_instances_legacy",
    "list_instances_page",
    "list_newest_infestations",
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
    items, _ = await list_infestations_dated(days=days, min_repos=min_repos, status=status, limit=limit)
    return items


async def list_infestations_dated(
    *, days: int = 30, min_repos: int = 2, status: str | None = None, limit: int = 40
) -> tuple[list[dict[str, Any]], datetime | None]:
    """`list_infestations` and when its counts were computed: the oldest `refreshed_at` of the rows shown (counts
    may lag a takedown until the refresh; identifying details never do, docs/domain.md §5.7), or now on the legacy
    path; None for an empty rollup list. Every filter combination walks a rank index in O(limit), so nothing is
    cached: a takedown holds at the next request through the read-time guard alone."""
    days, min_repos, limit, status = clamp_list_options(days=days, min_repos=min_repos, limit=limit, status=status)
    return await _list_dated(days=days, min_repos=min_repos, status=status, limit=limit)


async def _list_dated(
    *, days: int, min_repos: int, status: str | None, limit: int
) -> tuple[list[dict[str, Any]], datetime | None]:
    if config.read_from_rollup():
        return await _list_rollup(days=days, min_repos=min_repos, status=status, limit=limit)
    items = await list_infestations_legacy(days=days, min_repos=min_repos, status=status, limit=limit)
    return items, db.utcnow()


def _window_columns(window: int) -> str:
    # `window` is one of four ints from window_bucket(), never user text
    return ", ".join(
        [
            f"p.repo_count_{window}d AS repo_count",
            f"p.instance_count_{window}d AS instance_count",
            f"p.open_count_{window}d AS open_count",
            f"p.verified_count_{window}d AS verified_count",
            f"p.fixed_count_{window}d AS fixed_count",
            f"p.disputed_count_{window}d AS disputed_count",
            f"p.last_seen_at_{window}d AS last_seen_at",
        ]
    )


# The literal `>= 2` repeats the rank index predicate so the planner can always prove the partial index applies
# (min_repos is clamped to >= 2, so it never changes the result). The `last_seen_at_Wd >= :since` guard drops a
# pattern whose newest in-window instance has left the window before the hourly recompute catches up.
# The read-time guard (app.kernel.public): a pattern with no visible instance left is skipped, and a sample whose
# report was taken down is dropped (`sample_visible`), both at the next request, before any refresh.
# The pattern row's sample visibility, once per row (`OFFSET 0`: not inlined into both the select list and the
# WHERE), which `shown_pattern` reuses so the instance walk runs only for a pattern whose sample was taken down.
# `after`: the alias of the row the list walks, when `p` is joined to it; naming it makes the probe run on the
# joined rows, above the join, so the planner still walks the rank index and stops after `limit` rows (on the
# pattern table alone it may compute the probe for every pattern and sort).
_SAMPLE_VISIBLE = "sv.sample_visible"


def _sample_join(after: str | None = None) -> str:
    walked = f", {after}.pattern_key AS walked" if after else ""
    return (
        f"CROSS JOIN LATERAL (SELECT {visible_occurrence('p.sample_occurrence_public_id')} AS sample_visible{walked} "
        "OFFSET 0) sv"
    )


_RANKED_SQL = f"""
SELECT p.pattern_key, p.title, p.severity, p.sample_file_path, p.sample_occurrence_public_id, p.first_seen_at,
       p.refreshed_at, {_SAMPLE_VISIBLE}, {{columns}}
FROM infestation_patterns p {_sample_join()}
WHERE p.repo_count_{{w}}d >= 2 AND p.repo_count_{{w}}d >= :min_repos AND p.last_seen_at_{{w}}d >= :since
  AND {shown_pattern("p.pattern_key", _SAMPLE_VISIBLE)}
ORDER BY p.repo_count_{{w}}d DESC, p.last_seen_at_{{w}}d DESC NULLS LAST, p.pattern_key ASC
LIMIT :limit
"""

# Status filter: the (status, window) rows of infestation_pattern_status_windows, walked on their one partial rank
# index in O(limit) exactly like the unfiltered list, with the same bucket and read-time guard; representative
# fields and the all-time first_seen_at from the pattern row.
_STATUS_SQL = f"""
SELECT p.pattern_key, p.title, p.severity, p.sample_file_path, p.sample_occurrence_public_id, p.first_seen_at,
       p.refreshed_at, {_SAMPLE_VISIBLE},
       sw.repo_count, sw.instance_count, sw.last_seen_at
FROM infestation_pattern_status_windows sw
JOIN infestation_patterns p ON p.pattern_key = sw.pattern_key {_sample_join("sw")}
WHERE sw.status = :status AND sw.window_days = {{w}} AND sw.repo_count >= 2 AND sw.repo_count >= :min_repos
  AND sw.last_seen_at >= :since AND {shown_pattern("sw.pattern_key", _SAMPLE_VISIBLE)}
ORDER BY sw.repo_count DESC, sw.last_seen_at DESC, sw.pattern_key ASC
LIMIT :limit
"""


def ranked_list_sql(window: int) -> str:
    """The ranked-list statement for one window bucket (tests EXPLAIN it to prove the rank index is used)."""
    if window not in (7, 30, 90, 365):
        raise ValueError(f"no precomputed window of {window} days")
    return _RANKED_SQL.format(columns=_window_columns(window), w=window)


def status_list_sql(window: int) -> str:
    """The status-filtered list statement for one window bucket (`:status` bound at run time)."""
    if window not in (7, 30, 90, 365):
        raise ValueError(f"no precomputed window of {window} days")
    return _STATUS_SQL.format(w=window)


async def list_infestations_rollup(
    *, days: int = 30, min_repos: int = 2, status: str | None = None, limit: int = 40
) -> list[dict[str, Any]]:
    """Rollup path: counts and last_seen_at from the window bucket covering `days`, first_seen_at all-time
    (docs/domain.md §5.7). For `days` between buckets the counts are the bucket's; the guard uses the real `days`."""
    items, _ = await _list_rollup(days=days, min_repos=min_repos, status=status, limit=limit)
    return items


def guarded_map(row: Mapping[Any, Any]) -> dict[str, Any]:
    """The infestation map of a guarded pattern row: a sample whose report was taken down is dropped (the shared
    title stays) until the refresh picks another (docs/domain.md §5.7)."""
    item = infestation_map(row)
    if not row["sample_visible"]:
        item["sample_file_path"] = None
        item["sample_occurrence_public_id"] = None
    return item


async def _list_rollup(
    *, days: int, min_repos: int, status: str | None, limit: int
) -> tuple[list[dict[str, Any]], datetime | None]:
    days, min_repos, limit, status = clamp_list_options(days=days, min_repos=min_repos, limit=limit, status=status)
    window = window_bucket(days)
    since = db.utcnow() - timedelta(days=days)
    started = time.perf_counter()
    async with db.read_session() as session:
        if status is None:
            sql = ranked_list_sql(window)
            params: dict[str, Any] = {"min_repos": min_repos, "since": since, "limit": limit}
        else:
            sql = status_list_sql(window)
            params = {"status": status, "min_repos": min_repos, "since": since, "limit": limit}
        rows = (await session.execute(text(sql), params)).mappings().all()
    LIST_DURATION.labels(source="rollup", window=str(window)).observe(time.perf_counter() - started)
    items = []
    for row in rows:
        item = dict(row)
        if status is not None:
            for other in STATUSES:
                item[f"{other}_count"] = row["instance_count"] if other == status else 0
        items.append(guarded_map(item))
    return items, _oldest(row["refreshed_at"] for row in rows)


def _oldest(times: Iterable[datetime | None]) -> datetime | None:
    known = [t for t in times if t is not None]
    return min(known) if known else None


_GET_SQL = f"""
SELECT p.pattern_key, p.title, p.severity, p.sample_file_path, p.sample_occurrence_public_id, p.repo_count,
       p.instance_count, p.open_count, p.verified_count, p.fixed_count, p.disputed_count, p.last_seen_at,
       p.first_seen_at, p.refreshed_at, {_SAMPLE_VISIBLE}
FROM infestation_patterns p {_sample_join()}
WHERE p.pattern_key = :key AND {shown_pattern("p.pattern_key", _SAMPLE_VISIBLE)}
"""


async def get_infestation(pattern_key: str) -> dict[str, Any] | None:
    """All-time map of one pattern; None (the show page 404s) when there is no row, or when none of its rows is
    visible any more (the read-time guard). With the flag on, deliberately no legacy fallback: an emptied pattern is
    hard-deleted and must stay gone. With the flag off, the legacy aggregate (docs/domain.md §5.7)."""
    infestation, _ = await get_infestation_dated(pattern_key)
    return infestation


async def get_infestation_dated(pattern_key: str) -> tuple[dict[str, Any] | None, datetime | None]:
    """`get_infestation` and when its counts were computed (its rollup's `refreshed_at`, or now when read live)."""
    key = parse_pattern_key(pattern_key)
    if key is None:
        return None, None
    if not config.read_from_rollup():
        return await get_infestation_legacy(key), db.utcnow()
    async with db.read_session() as session:
        row = (await session.execute(text(_GET_SQL), {"key": key})).mappings().first()
    return (None, None) if row is None else (guarded_map(row), row["refreshed_at"])


_INSTANCES_SQL = """
SELECT i.canonical_finding_id AS id, c.public_id, i.sample_occurrence_public_id AS occurrence_public_id,
       i.status, i.severity, i.title, i.file_path, c.detections_count, c.confirmations_count,
       r.host, r.owner, r.name, i.repository_id, i.sample_commit_sha AS commit_sha, i.sample_scan_id AS scan_id,
       i.updated_at
FROM infestation_pattern_instances i
JOIN repositories r ON r.id = i.repository_id
JOIN canonical_findings c ON c.id = i.canonical_finding_id
WHERE i.pattern_key = :key AND {after} AND {guard}
ORDER BY i.updated_at DESC, i.canonical_finding_id DESC
LIMIT :fetch
""".replace("{guard}", visible_scan("i.sample_scan_id"))


async def _fetch_instances(pattern_key: str, *, limit: int, cursor: str | None) -> Page[dict[str, Any]]:
    if not config.read_from_rollup():
        return await list_instances_legacy(parse_pattern_key(pattern_key) or "", limit=limit, cursor=cursor)
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
WHERE m.pattern_key = :key AND {after} AND {guard}
ORDER BY m.last_seen_at DESC, m.repository_id DESC
LIMIT :fetch
""".replace("{guard}", visible_occurrence("m.sample_occurrence_public_id"))


async def list_pattern_repos_page(
    pattern_key: str, *, limit: int = 64, cursor: str | None = None
) -> Page[dict[str, Any]]:
    """Repositories affected by a pattern, most recently seen first (default 64 = the graph's satellites,
    max 100), keyset on `(last_seen_at DESC, repository_id DESC)`. A membership whose repository or sample report
    was taken down is skipped at once (the read-time guard)."""
    limit = clamp(limit, 1, PAGE_MAX)
    if not config.read_from_rollup():
        return await list_pattern_repos_legacy(parse_pattern_key(pattern_key), limit=limit, cursor=cursor)
    return await newest_first_page(
        _REPOS_SQL,
        "(m.last_seen_at, m.repository_id)",
        parse_pattern_key(pattern_key),
        limit=limit,
        cursor=cursor,
        entry=membership_entry,
    )


# A visible membership (its repository listed, its sample's report public) implies a visible pattern.
_REPOSITORY_INFESTATIONS_SQL = f"""
SELECT p.pattern_key, p.title, p.severity, p.sample_file_path, p.sample_occurrence_public_id, p.repo_count,
       p.instance_count, p.open_count, p.verified_count, p.fixed_count, p.disputed_count, p.last_seen_at,
       p.first_seen_at, {_SAMPLE_VISIBLE},
       m.instance_count AS repository_instance_count, m.open_count AS repository_open_count,
       m.primary_status AS repository_status, m.sample_occurrence_public_id AS repository_occurrence_public_id
FROM infestation_pattern_repos m
JOIN infestation_patterns p ON p.pattern_key = m.pattern_key {_sample_join("m")}
WHERE m.repository_id = :repository_id AND p.repo_count >= :min_repos
  AND {visible_occurrence("m.sample_occurrence_public_id")}
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
    limit, min_repos = clamp(limit, 1, PAGE_MAX), clamp(min_repos, 1, 50)
    if not config.read_from_rollup():
        return await list_repository_infestations_legacy(int(repository_id), limit=limit, min_repos=min_repos)
    params = {"repository_id": int(repository_id), "limit": limit, "min_repos": min_repos}
    async with db.read_session() as session:
        rows = (await session.execute(text(_REPOSITORY_INFESTATIONS_SQL), params)).mappings().all()
    items = []
    for row in rows:
        items.append(with_repository_share(guarded_map(row), row, prefix="repository_"))
    return items


_NEWEST_SQL = f"""
SELECT p.pattern_key, p.title, p.severity, p.sample_file_path, p.sample_occurrence_public_id, p.repo_count,
       p.instance_count, p.open_count, p.verified_count, p.fixed_count, p.disputed_count, p.last_seen_at,
       p.first_seen_at, {_SAMPLE_VISIBLE}
FROM infestation_patterns p {_sample_join()}
WHERE p.repo_count >= 2 AND p.first_seen_at IS NOT NULL AND {shown_pattern("p.pattern_key", _SAMPLE_VISIBLE)}
ORDER BY p.first_seen_at DESC, p.pattern_key
LIMIT :limit
"""


async def list_newest_infestations(*, limit: int = 20) -> list[dict[str, Any]]:
    """Infestations (all-time, at least 2 repositories) by first sighting, newest first: the "new" half of the atlas
    feed. Guarded like every atlas read; the legacy aggregate when the flag is off."""
    limit = clamp(limit, 1, PAGE_MAX)
    if not config.read_from_rollup():
        return await list_newest_infestations_legacy(limit=limit)
    async with db.read_session() as session:
        rows = (await session.execute(text(_NEWEST_SQL), {"limit": limit})).mappings().all()
    return [guarded_map(row) for row in rows]
