"""Who may see a report or a repository and who may write to one, side by side (docs/domain.md §1.1-1.2)."""

from __future__ import annotations

from typing import Literal, Protocol

from app.kernel.actors import Actor, Viewer, can_moderate, is_privileged_viewer

Access = Literal["full", "header", "hidden"]


# --- read access ----------------------------------------------------------------------------------------------


def repository_visible(viewer: Viewer, listing_status: str) -> bool:
    return viewer.privileged or listing_status != "quarantined"


def report_access(viewer: Viewer, *, listing_status: str, visibility: str, published: bool = True) -> Access:
    """What `viewer` may see of one report: everything, its header, or nothing. `published`: the report (or the
    occurrence read) is not held back by a gate; an unpublished one is the privileged viewers' only."""
    if viewer.privileged:
        return "full"
    if not published or not repository_visible(viewer, listing_status):
        return "hidden"
    if visibility == "public":
        return "full"
    if visibility == "public_summary":
        return "header"
    return "hidden"


def visible_visibilities(viewer: Viewer) -> list[str]:
    """The scan visibilities worth fetching for `viewer` (pre-filter; `report_access` stays the judge)."""
    return ["public", "public_summary", "restricted"] if viewer.privileged else ["public", "public_summary"]


# --- write permission -----------------------------------------------------------------------------------------


class Writer(Actor, Protocol):
    @property
    def id(self) -> int: ...


def repository_writable(writer: Writer, *, listing_status: str, submitted_by_id: int | None) -> bool:
    """May `writer` submit to (or check findings of) this repository? Quarantine admits only its submitter and
    moderators in good standing: unlike reading, being a reviewer is not enough."""
    return listing_status != "quarantined" or submitted_by_id == writer.id or can_moderate(writer)


def report_writable(writer: Writer, *, visibility: str, submitted_by_id: int | None) -> bool:
    """May `writer` record a verdict on this report? A restricted report is reachable only by privileged accounts
    (as when reading) and by its own submitter."""
    return visibility != "restricted" or submitted_by_id == writer.id or is_privileged_viewer(writer)
