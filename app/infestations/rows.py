"""The atlas's rows, typed once: the list filters and their one clamp, the infestation map, ledger and satellite
entries as the answers send them, and the newest-first page the rollup reads and the legacy path share
(docs/domain.md §4.1, §4.4, §5.7)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Annotated, Any, TypeVar
from urllib.parse import urlencode

import msgspec
from msgspec import Meta

from app.infestations.models import COUNTS, UNKNOWN_TITLE
from app.kernel import db
from app.kernel.answers import Answer, Timestamp, Uuid, enum, iso, uuid_text
from app.kernel.paging import Page, Pages, cursor_params, keyset_page, time_id_cursor
from app.kernel.sql import WINDOW_DAYS
from app.reports.models import CANONICAL_STATUSES

MIN_REPOS_CHOICES = (2, 3, 5, 10)  # the index's filter, and what shadow-compare covers
STATUS_CHOICES = ("all", "open", "verified", "fixed", "disputed")  # the index's status filter
INDEX_LIMIT = 50  # the index's rows when the address names no limit
Status = Annotated[str, enum(CANONICAL_STATUSES)]
Row = Mapping[str, Any]
A = TypeVar("A", bound=Answer)


def clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, int(value)))


def window_bucket(days: int) -> int:
    """The smallest precomputed window covering `days` (exact for 7/30/90/365; 365 past it)."""
    return next((w for w in WINDOW_DAYS if days <= w), WINDOW_DAYS[-1])


# The ranked list's filters, clamped once (`of`): what the index parses from its address, the render cache keys on,
# the reads take, and the twin says it answered, with the window whose counts it read (§5.7: the smallest bucket
# covering `days` on the rollups, with or without a status filter; the real days on the legacy path).
class InfestationFilters(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):  # an Answer, hashable
    """The filters the index answered (clamped) and the window whose counts it read."""

    days: Annotated[int, Meta(ge=1, le=365)]
    min_repos: int
    status: Annotated[str, enum(STATUS_CHOICES)]
    limit: int
    counts_window_days: int

    @classmethod
    def of(
        cls, *, days: int = 30, min_repos: int = 2, status: str | None = None, limit: int = 40, rollup: bool = True
    ) -> InfestationFilters:
        """The one clamp (§4.1): days 1..365, min_repos 2..50, limit 1..100; an unknown status is "all" rather than
        an error (the list is a public page with forgiving filters). `rollup`: the path that reads them."""
        days = clamp(days, 1, 365)
        return cls(
            days=days,
            min_repos=clamp(min_repos, 2, 50),
            status=status if status in CANONICAL_STATUSES else "all",
            limit=clamp(limit, 1, 100),
            counts_window_days=window_bucket(days) if rollup else days,
        )

    @property
    def status_filter(self) -> str | None:
        """The status the reads narrow to; None for "all"."""
        return None if self.status == "all" else self.status

    def query_string(self) -> str:
        query: dict[str, object] = {"days": self.days, "min_repos": self.min_repos, "status": self.status}
        if self.limit != INDEX_LIMIT:
            query["limit"] = self.limit
        return urlencode(query)


class Infestation(Answer):
    """The infestation map: the same keys on every path; counts of the requested window."""

    pattern_key: Annotated[str, Meta(pattern="^[0-9a-f]{64}$")]
    title: str
    severity: str | None
    sample_file_path: Annotated[str | None, Meta(description="null once the sample's report is taken down")]
    sample_occurrence_public_id: Uuid | None
    repo_count: int
    instance_count: int
    open_count: int
    verified_count: int
    fixed_count: int
    disputed_count: int
    last_seen_at: Timestamp | None
    first_seen_at: Timestamp | None


class RepositoryInfestation(Infestation):
    """The infestation map plus one repository's share of it (a repository's record)."""

    repository_instance_count: int
    repository_open_count: int
    repository_status: Status
    repository_occurrence_public_id: Uuid | None


_REPOSITORY_ID = Meta(description="the repository's serial id (see repository_uuid)")
_REPOSITORY_UUID = Meta(
    description="the repository's opaque id, as the change feed and the export name it (null until the feed has "
    "announced the repository)"
)


class Instance(Answer):
    """One ledger row."""

    id: int
    public_id: Uuid
    occurrence_public_id: Uuid | None
    status: Status
    severity: str | None
    title: str
    file_path: str | None
    detections_count: int
    confirmations_count: int
    host: str
    owner: str
    name: str
    repository_id: Annotated[int, _REPOSITORY_ID]
    repository_uuid: Annotated[Uuid | None, _REPOSITORY_UUID]
    commit_sha: str | None
    scan_id: int | None
    updated_at: Timestamp | None


class AffectedRepository(Answer):
    """A repository affected by the pattern."""

    id: int
    repository_id: Annotated[int, _REPOSITORY_ID]
    repository_uuid: Annotated[Uuid | None, _REPOSITORY_UUID]
    host: str
    owner: str
    name: str
    status: Status
    severity: str | None
    title: str | None
    instance_count: int
    open_count: int
    occurrence_public_id: Uuid | None
    updated_at: Timestamp | None


INFESTATION_KEYS: tuple[str, ...] = Infestation.__struct_fields__
INSTANCE_KEYS: tuple[str, ...] = Instance.__struct_fields__


def as_answer(kind: type[A], row: Row) -> A:
    """The answer `kind` of a row: its fields by name, in its order; timestamps as `iso()`."""
    return kind(**{name: _sent(row[name]) for name in kind.__struct_fields__})


def _sent(value: object) -> object:
    return iso(value) if isinstance(value, datetime) else value


# Instance ledgers and satellites are newest-first on `(updated_at, id)` (`id` the canonical's or repository's).
BY_UPDATED_AT = time_id_cursor("updated_at", "id")


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
    async with db.reader() as read:
        rows = await read.maps(statements[cursor is not None], params)
    return keyset_page([entry(row) for row in rows], limit, BY_UPDATED_AT)
