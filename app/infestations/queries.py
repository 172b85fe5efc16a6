"""Read APIs of the infestation atlas over the rollup tables, the legacy aggregate when the flag is off
(docs/domain.md §5.7, §13 "Read APIs")."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, FromClause, Select, bindparam, select, true

from app.infestations.legacy import (
    get_infestation_legacy,
    list_infestations_legacy,
    list_instances_legacy,
    list_newest_infestations_legacy,
    ranked_legacy,
)
from app.infestations.models import (
    WINDOWED_AGGREGATES,
    InfestationPattern,
    InfestationPatternInstance,
    InfestationPatternRepo,
    InfestationPatternStatusWindow,
)
from app.infestations.rows import (
    InfestationFilters,
    clamp,
    infestation_map,
    instance_entry,
    newest_first_page,
    window_bucket,
)
from app.kernel import db, flags
from app.kernel.metrics import LIST_DURATION
from app.kernel.paging import Page, Pages, after_keyset
from app.kernel.sql import WINDOW_DAYS, Window, compiled
from app.record.models import PublishedRepository
from app.record.public import shown_pattern, visible_occurrence, visible_scan
from app.registry.models import Repository
from app.reports.models import CANONICAL_STATUSES, CanonicalFinding

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
    "parse_pattern_key",
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
    rollup = await flags.read_from_rollup()
    filters = InfestationFilters.of(days=days, min_repos=min_repos, status=status, limit=limit, rollup=rollup)
    dated = await list_infestations_dated(filters, rollup=rollup)
    return dated.items


class DatedList(NamedTuple):
    items: list[dict[str, Any]]
    refreshed_at: datetime | None


async def list_infestations_dated(filters: InfestationFilters, *, rollup: bool) -> DatedList:
    """`list_infestations`, when its counts were computed and over which window: the oldest `refreshed_at` of the
    rows shown (counts may lag a takedown until the refresh; identifying details never do, docs/domain.md §5.7), or
    now on the legacy path; None for an empty rollup list. `rollup`: the read flag as the request read it once (the
    filters' `counts_window_days` says the same path). Every filter combination walks a rank index in O(limit), so
    nothing is cached: a takedown holds at the next request through the read-time guard alone."""
    if rollup:
        return DatedList(*await ranked_rollup(filters))
    return DatedList(await ranked_legacy(filters), db.utcnow())


# Statements are composed with Core once, at import, and compiled to the text that runs (docs/architecture.md
# "Composing SQL"): a request binds parameters only, and the plan tests EXPLAIN exactly what runs.
patterns = InfestationPattern.__table__.alias("p")
status_windows = InfestationPatternStatusWindow.__table__.alias("sw")
instances = InfestationPatternInstance.__table__.alias("i")
pattern_repos = InfestationPatternRepo.__table__.alias("m")
repositories = Repository.__table__.alias("r")
canonicals = CanonicalFinding.__table__.alias("c")
# the repository's opaque id (the change feed's and the export's `repository_id`), served as `repository_uuid`
published_repositories = PublishedRepository.__table__.alias("pr")

REPRESENTATIVE_COLUMNS = (
    patterns.c.title,
    patterns.c.severity,
    patterns.c.sample_file_path,
    patterns.c.sample_occurrence_public_id,
)
ALL_TIME_COLUMNS = tuple(patterns.c[name] for name in (*WINDOWED_AGGREGATES, "first_seen_at"))


def _windowed(name: str, window: Window) -> ColumnElement[Any]:
    return patterns.c[f"{name}_{window}d"]


def sample_visible(walked: FromClause | None = None) -> FromClause:
    """`sv.sample_visible`: the pattern row's sample is visible, once per row (`OFFSET 0`: not inlined into both the
    select list and the WHERE), which `shown_pattern` reuses. `walked`: the row the list walks when `p` is joined to
    it; naming it runs the probe above the join, so the planner still walks the rank index and stops at `limit`."""
    columns = [visible_occurrence(patterns.c.sample_occurrence_public_id).label("sample_visible")]
    if walked is not None:
        columns.append(walked.c.pattern_key.label("walked"))
    return select(*columns).correlate(patterns, *([] if walked is None else [walked])).offset(0).lateral("sv")


def _list_row(sv: FromClause, *counts: ColumnElement[Any]) -> list[ColumnElement[Any]]:
    """A ranked list's row: the pattern's representative fields, all-time first_seen_at and the guard's flag, then
    `counts`."""
    return [
        patterns.c.pattern_key,
        *REPRESENTATIVE_COLUMNS,
        patterns.c.first_seen_at,
        patterns.c.refreshed_at,
        sv.c.sample_visible,
        *counts,
    ]


def _walk(
    repo_count: ColumnElement[Any], last_seen_at: ColumnElement[Any], key: ColumnElement[Any], sv: FromClause
) -> tuple[ColumnElement[bool], ...]:
    """What a ranked list walks: `>= 2` repeats the rank index predicate so the planner proves the partial index
    applies (min_repos is clamped to >= 2); `:since` drops a pattern whose instances left the window before the hourly
    recompute; the guard skips a pattern with no visible instance."""
    since = last_seen_at >= bindparam("since")
    return repo_count >= 2, repo_count >= bindparam("min_repos"), since, shown_pattern(key, sv.c.sample_visible)


def _ranked(window: Window) -> Select[Any]:
    sv = sample_visible()
    repo_count, last_seen_at = _windowed("repo_count", window), _windowed("last_seen_at", window)
    return (
        select(*_list_row(sv, *(_windowed(name, window).label(name) for name in WINDOWED_AGGREGATES)))
        .select_from(patterns.join(sv, true()))
        .where(*_walk(repo_count, last_seen_at, patterns.c.pattern_key, sv))
        .order_by(repo_count.desc(), last_seen_at.desc().nulls_last(), patterns.c.pattern_key.asc())
        .limit(bindparam("limit"))
    )


def _status_ranked(window: Window) -> Select[Any]:
    # the (status, window) rows on their one partial rank index, walked like the unfiltered list
    sv = sample_visible(status_windows)
    return (
        select(
            *_list_row(sv, status_windows.c.repo_count, status_windows.c.instance_count, status_windows.c.last_seen_at)
        )
        .select_from(
            status_windows.join(patterns, patterns.c.pattern_key == status_windows.c.pattern_key).join(sv, true())
        )
        .where(
            status_windows.c.status == bindparam("status"),
            status_windows.c.window_days == int(window),
            *_walk(status_windows.c.repo_count, status_windows.c.last_seen_at, status_windows.c.pattern_key, sv),
        )
        .order_by(
            status_windows.c.repo_count.desc(), status_windows.c.last_seen_at.desc(), status_windows.c.pattern_key.asc()
        )
        .limit(bindparam("limit"))
    )


_RANKED = {w: compiled(_ranked(Window(w))) for w in WINDOW_DAYS}
_STATUS_RANKED = {w: compiled(_status_ranked(Window(w))) for w in WINDOW_DAYS}


def ranked_list_sql(window: int) -> str:
    """The ranked-list statement for one window bucket (tests EXPLAIN it to prove the rank index is used)."""
    return _RANKED[Window(window)].text


def status_list_sql(window: int) -> str:
    """The status-filtered list statement for one window bucket (`:status` bound at run time)."""
    return _STATUS_RANKED[Window(window)].text


async def list_infestations_rollup(
    *, days: int = 30, min_repos: int = 2, status: str | None = None, limit: int = 40
) -> list[dict[str, Any]]:
    """Rollup path: counts and last_seen_at from the window bucket covering `days`, first_seen_at all-time
    (docs/domain.md §5.7). For `days` between buckets the counts are the bucket's; the guard uses the real `days`."""
    items, _ = await ranked_rollup(InfestationFilters.of(days=days, min_repos=min_repos, status=status, limit=limit))
    return items


def guarded_map(row: Mapping[Any, Any]) -> dict[str, Any]:
    """The infestation map of a guarded pattern row: a sample whose report was taken down is dropped (the shared
    title stays) until the refresh picks another (docs/domain.md §5.7)."""
    item = infestation_map(row)
    if not row["sample_visible"]:
        item["sample_file_path"] = None
        item["sample_occurrence_public_id"] = None
    return item


async def ranked_rollup(filters: InfestationFilters) -> tuple[list[dict[str, Any]], datetime | None]:
    """The rollup list of clamped filters (its counts of their window bucket) and the oldest `refreshed_at` of its
    rows."""
    status = filters.status_filter
    window = window_bucket(filters.days)
    params: dict[str, Any] = {
        "min_repos": filters.min_repos,
        "since": db.utcnow() - timedelta(days=filters.days),
        "limit": filters.limit,
    }
    started = time.perf_counter()
    if status is None:
        statement = _RANKED[window]
    else:
        statement = _STATUS_RANKED[window]
        params["status"] = status
    async with db.reader() as read:
        rows = await read.maps(statement, params)
    LIST_DURATION.labels(source="rollup", window=str(window)).observe(time.perf_counter() - started)
    items = []
    for item in rows:
        if status is not None:
            for other in CANONICAL_STATUSES:
                item[f"{other}_count"] = item["instance_count"] if other == status else 0
        items.append(guarded_map(item))
    return items, _oldest(row["refreshed_at"] for row in rows)


def _oldest(times: Iterable[datetime | None]) -> datetime | None:
    known = [t for t in times if t is not None]
    return min(known) if known else None


def _shown_patterns(*columns: ColumnElement[Any]) -> Select[Any]:
    """Pattern rows with their all-time map and `sample_visible`, only those still shown (the read-time guard)."""
    sv = sample_visible()
    return (
        select(patterns.c.pattern_key, *REPRESENTATIVE_COLUMNS, *ALL_TIME_COLUMNS, *columns, sv.c.sample_visible)
        .select_from(patterns.join(sv, true()))
        .where(shown_pattern(patterns.c.pattern_key, sv.c.sample_visible))
    )


def _get() -> Select[Any]:
    return _shown_patterns(patterns.c.refreshed_at).where(patterns.c.pattern_key == bindparam("key"))


_GET = compiled(_get())
PATTERN_SQL = _GET  # one pattern's row by `:key` (the show page reads it beside its pages: app.infestations.routes)


async def get_infestation(pattern_key: str) -> dict[str, Any] | None:
    """All-time map of one pattern; None (the show page 404s) when there is no row, or when none of its rows is
    visible any more (the read-time guard). With the flag on, deliberately no legacy fallback: an emptied pattern is
    hard-deleted and must stay gone. With the flag off, the legacy aggregate (docs/domain.md §5.7)."""
    infestation, _ = await get_infestation_dated(pattern_key)
    return infestation


async def get_infestation_dated(
    pattern_key: str, *, rollup: bool | None = None
) -> tuple[dict[str, Any] | None, datetime | None]:
    """`get_infestation` and when its counts were computed (its rollup's `refreshed_at`, or now when read live).
    `rollup`: the read flag as the request read it (None: read it here)."""
    key = parse_pattern_key(pattern_key)
    if key is None:
        return None, None
    if not (await flags.read_from_rollup() if rollup is None else rollup):
        return await get_infestation_legacy(key), db.utcnow()
    async with db.reader() as read:
        found = await read.maps(_GET, {"key": key})
    return (None, None) if not found else (guarded_map(found[0]), found[0]["refreshed_at"])


def newest_first(query: Select[Any], updated_at: ColumnElement[Any], row_id: ColumnElement[Any]) -> Select[Any]:
    """A pattern's rows newest first on `(updated_at, id)`, `LIMIT :fetch`."""
    return query.order_by(updated_at.desc(), row_id.desc()).limit(bindparam("fetch"))


def newest_first_pages(query: Select[Any], updated_at: ColumnElement[Any], row_id: ColumnElement[Any]) -> Pages:
    """The first page of a newest-first list, and the pages after a cursor."""
    return {False: compiled(query), True: compiled(query.where(after_keyset(updated_at, row_id)))}


def _instances() -> Select[Any]:
    query = (
        select(
            instances.c.canonical_finding_id.label("id"),
            canonicals.c.public_id,
            instances.c.sample_occurrence_public_id.label("occurrence_public_id"),
            instances.c.status,
            instances.c.severity,
            instances.c.title,
            instances.c.file_path,
            canonicals.c.detections_count,
            canonicals.c.confirmations_count,
            repositories.c.host,
            repositories.c.owner,
            repositories.c.name,
            instances.c.repository_id,
            published_repositories.c.opaque_id.label("repository_uuid"),
            instances.c.sample_commit_sha.label("commit_sha"),
            instances.c.sample_scan_id.label("scan_id"),
            instances.c.updated_at,
        )
        .select_from(
            instances.join(repositories, repositories.c.id == instances.c.repository_id)
            .join(canonicals, canonicals.c.id == instances.c.canonical_finding_id)
            .outerjoin(published_repositories, published_repositories.c.repository_id == instances.c.repository_id)
        )
        .where(instances.c.pattern_key == bindparam("key"), visible_scan(instances.c.sample_scan_id))
    )
    return newest_first(query, instances.c.updated_at, instances.c.canonical_finding_id)


_INSTANCES = newest_first_pages(_instances(), instances.c.updated_at, instances.c.canonical_finding_id)
INSTANCE_PAGES = _INSTANCES  # the ledger's statements, first page and after a cursor


async def _fetch_instances(
    pattern_key: str, *, limit: int, cursor: str | None, rollup: bool | None = None
) -> Page[dict[str, Any]]:
    if not (await flags.read_from_rollup() if rollup is None else rollup):
        return await list_instances_legacy(parse_pattern_key(pattern_key) or "", limit=limit, cursor=cursor)
    return await newest_first_page(
        _INSTANCES,
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


async def list_instances_page(
    pattern_key: str, *, limit: int = 50, cursor: str | None = None, rollup: bool | None = None
) -> Page[dict[str, Any]]:
    """One ledger page `{"entries", "next_cursor"}` (default 50, max 100), keyset on
    `(updated_at DESC, canonical id DESC)`. A malformed cursor raises InvalidCursor (400). `rollup`: as in
    `get_infestation_dated`."""
    return await _fetch_instances(pattern_key, limit=clamp(limit, 1, PAGE_MAX), cursor=cursor, rollup=rollup)


_NEWEST = compiled(
    _shown_patterns()
    .where(patterns.c.repo_count >= 2, patterns.c.first_seen_at.is_not(None))
    .order_by(patterns.c.first_seen_at.desc(), patterns.c.pattern_key)
    .limit(bindparam("limit"))
)


def newest_list_sql() -> str:
    """The newest-infestations statement (tests EXPLAIN it to prove `infestation_patterns_first_seen_idx` is used)."""
    return _NEWEST.text


async def list_newest_infestations(*, limit: int = 20) -> list[dict[str, Any]]:
    """Infestations (all-time, at least 2 repositories) by first sighting, newest first: the "new" half of the atlas
    feed. Guarded like every atlas read; the legacy aggregate when the flag is off."""
    limit = clamp(limit, 1, PAGE_MAX)
    if not await flags.read_from_rollup():
        return await list_newest_infestations_legacy(limit=limit)
    async with db.reader() as read:
        rows = await read.maps(_NEWEST, {"limit": limit})
    return [guarded_map(row) for row in rows]
