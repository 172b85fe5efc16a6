"""The change feed's page as a typed structure (docs/domain.md §13), built from `app.feed.queries.changes_page`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from msgspec import Meta

from app.kernel.answers import UNSET, Answer, Timestamp, UnsetType, Uuid, enum
from app.kernel.paging import Page
from app.maintainers.models import VEX_JUSTIFICATIONS, VEX_STATUSES
from app.record.models import KINDS, OBSERVATION_REASONS, REASONS
from app.record.observations import STATES
from app.reports.models import CANONICAL_STATUSES


class ChangeEntry(Answer):
    """Which ids each kind carries; a withdrawn finding or repository keeps only kind, seq, at and its opaque ids
    in every entry (rendered at read time)."""

    seq: Annotated[int, Meta(description="increasing; commit order")]
    at: Timestamp
    kind: Annotated[str, enum(KINDS)]
    finding: Annotated[Uuid, Meta(description="occurrence public_id")] | UnsetType = UNSET
    canonical: Annotated[Uuid, Meta(description="canonical finding public_id")] | UnsetType = UNSET
    repository: Annotated[str, Meta(description="host/owner/name")] | UnsetType = UNSET
    repository_id: Annotated[Uuid, Meta(description="opaque repository id (not the serial id)")] | UnsetType = UNSET
    pattern_key: str | UnsetType | None = UNSET
    status: (
        Annotated[
            str,
            enum(
                (*CANONICAL_STATUSES, *VEX_STATUSES),
                "finding.status: the canonical's status; finding.statement: the maintainer's OpenVEX status",
            ),
        ]
        | UnsetType
    ) = UNSET
    justification: (
        Annotated[str, enum(VEX_JUSTIFICATIONS, "finding.statement: the OpenVEX justification")] | UnsetType | None
    ) = UNSET
    reason: (
        Annotated[
            str,
            enum(
                (*REASONS, *OBSERVATION_REASONS),
                "finding.withdrawn: why; finding.statement: `moderation` for a hide; finding.observed: why absent",
            ),
        ]
        | UnsetType
    ) = UNSET
    state: Annotated[str, enum(STATES, "finding.observed: the code at the default branch's head")] | UnsetType = UNSET
    commit: Annotated[str, Meta(description="finding.observed: the head commit read")] | UnsetType = UNSET


def _id(entry: Mapping[str, Any], key: str) -> str | UnsetType:
    return str(entry[key]) if key in entry else UNSET


def change_entry(entry: Mapping[str, Any]) -> ChangeEntry:
    return ChangeEntry(
        seq=entry["seq"],
        at=entry["at"].isoformat(),
        kind=entry["kind"],
        finding=_id(entry, "finding"),
        canonical=_id(entry, "canonical"),
        repository=entry.get("repository", UNSET),
        repository_id=_id(entry, "repository_id"),
        pattern_key=entry.get("pattern_key", UNSET),
        status=entry.get("status", UNSET),
        justification=entry.get("justification", UNSET),
        reason=entry.get("reason", UNSET),
        state=entry.get("state", UNSET),
        commit=entry.get("commit", UNSET),
    )


class ChangePage(Answer):
    entries: list[ChangeEntry]
    next_cursor: Annotated[str, Meta(description="always set: resume or poll from it")]


def change_page(page: Page[dict[str, Any]]) -> ChangePage:
    assert page["next_cursor"] is not None  # the feed always sets it
    return ChangePage(entries=[change_entry(e) for e in page["entries"]], next_cursor=page["next_cursor"])
