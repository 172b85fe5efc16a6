"""What the rollup reads and the legacy path share: the list filters and their one clamp, the infestation map,
ledger and satellite entries, and the newest-first page (docs/domain.md §4.1, §4.4, §5.7)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from app.infestations.models import COUNTS, UNKNOWN_TITLE, WINDOWED_AGGREGATES
from app.kernel import db
from app.kernel.answers import uuid_text
from app.kernel.paging import Page, Pages, cursor_params, keyset_page, time_id_cursor
from app.kernel.sql import WINDOW_DAYS
from app.reports.models import CANONICAL_STATUSES

MIN_REPOS_CHOICES = (2, 3, 5, 10)  # the index's filter, and what shadow-compare covers

# The infestation map of docs/domain.md §5.7: identical keys on every path (legacy, rollup, status-filtered).
INFESTATION_KEYS = (
    "pattern_key",
    "title",
    "severity",
    "sample_file_path",
    "sample_occurrence_public_id",
    *WINDOWED_AGGREGATES,
    "first_seen_at",
)

# Instance entries of docs/domain.md §4.4.
INSTANCE_KEYS = (
    "id",
    "public_id",
    "occurrence_public_id",
    "status",
    "severity",
    "title",
    "file_path",
    "detections_count",
    "confirmations_count",
    "host",
    "owner",
    "name",
    "repository_id",
    "repository_uuid",
    "commit_sha",
    "scan_id",
    "updated_at",
)

# Instance ledgers and satellites are newest-first on `(updated_at, id)` (`id` the canonical's or repository's).
BY_UPDATED_AT = time_id_cursor("updated_at", "id")


def clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, int(value)))


@dataclass(frozen=True)
class ListOptions:
    """The ranked list's filters, already clamped by `list_options`."""

    days: int = 30
    min_repos: int = 2
    status: str | None = None
    limit: int = 40


def list_options(*, days: int = 30, min_repos: int = 2, status: str | None = None, limit: int = 40) -> ListOptions:
    """The one clamp of the list's filters (§4.1): days 1..365, min_repos 2..50, limit 1..100; an unknown status is
    "no filter" rather than an error (the list is a public page with forgiving filters)."""
    return ListOptions(
        days=clamp(days, 1, 365),
        min_repos=clamp(min_repos, 2, 50),
        status=status if status in CANONICAL_STATUSES else None,
        limit=clamp(limit, 1, 100),
    )


def window_bucket(days: int) -> int:
    """The smallest precomputed window covering `days` (exact for 7/30/90/365; 365 past it)."""
    return next((w for w in WINDOW_DAYS if days <= w), WINDOW_DAYS[-1])


def infestation_map(row: Mapping[Any, Any]) -> dict[str, Any]:
    item = {key: row.get(key) for key in INFESTATION_KEYS}
    item["title"] = item["title"] or UNKNOWN_TITLE
    item["sample_occurrence_public_id"] = uuid_text(item["sample_occurrence_public_id"])
    for key in COUNTS:
        item[key] = int(item[key] or 0)
    return item


def instance_entry(row: Mapping[Any, Any]) -> dict[str, Any]:
    entry = {key: row[key] for key in INSTANCE_KEYS}
    entry["public_id"] = uuid_text(entry["public_id"])
    entry["occurrence_public_id"] = uuid_text(entry["occurrence_public_id"])
    entry["repository_uuid"] = uuid_text(entry["repository_uuid"])
    return entry


def membership_entry(row: Mapping[Any, Any]) -> dict[str, Any]:
    """A graph satellite (docs/domain.md §5.7 `list_pattern_repos_page`), the same on both paths."""
    return {
        **row,
        "occurrence_public_id": uuid_text(row["occurrence_public_id"]),
        "repository_uuid": uuid_text(row["repository_uuid"]),
    }


def with_repository_share(item: dict[str, Any], share: Mapping[Any, Any], *, prefix: str) -> dict[str, Any]:
    """A repository page's infestation entry: the pattern plus that repository's share of it (`prefix` names the
    share's columns in `share`: bare on the legacy path, `repository_` on the rollup path)."""
    item["repository_instance_count"] = int(share[f"{prefix}instance_count"])
    item["repository_open_count"] = int(share[f"{prefix}open_count"])
    item["repository_status"] = share[f"{prefix}status"]
    item["repository_occurrence_public_id"] = uuid_text(share[f"{prefix}occurrence_public_id"])
    return item


async def newest_first_page(
    statements: Pages,
    pattern_key: str | None,
    *,
    limit: int,
    cursor: str | None,
    entry: Callable[[Mapping[Any, Any]], dict[str, Any]],
) -> Page[dict[str, Any]]:
    """One page of a pattern's rows, newest first on their `(updated_at, id)`: `statements` read `:key` and `:fetch`
    (and the cursor's keyset). A key that did not parse (None) is an empty page; a malformed cursor is
    InvalidCursor either way."""
    params = cursor_params(cursor)
    if pattern_key is None:
        return {"entries": [], "next_cursor": None}
    params.update(key=pattern_key, fetch=limit + 1)
    async with db.read_session() as session:
        rows = (await session.execute(statements[cursor is not None], params)).mappings().all()
    return keyset_page([entry(row) for row in rows], limit, BY_UPDATED_AT)
