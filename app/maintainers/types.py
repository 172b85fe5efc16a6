"""The maintainers' API answers as typed structures (docs/domain.md "Maintainers")."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from msgspec import Meta, Struct

from app.kernel.answers import Answer, Timestamp, Uuid, enum
from app.maintainers.models import CLAIM_STATES
from app.reports.embargo import DisclosureAnswer
from app.reports.types import FindingDetail


class NoBody(Struct, forbid_unknown_fields=True):
    """The claim and verify requests take no fields: send no body, or `{}`."""

    EXAMPLES: ClassVar[list[dict[str, Any]]] = [{}]


class Claim(Answer):
    id: int
    repository: Annotated[str, Meta(description="host/owner/name")]
    state: Annotated[str, enum(CLAIM_STATES)]
    token: Annotated[str, Meta(description="commit it as a line of `path` on the default branch")]
    path: Annotated[str, Meta(description="the file the forge is asked for: .tarakan/verify.txt")]
    expires_at: Timestamp
    verified_at: Timestamp | None


class ClaimAnswer(Answer):
    claim: Claim


def claim_answer(claim: Claim) -> ClaimAnswer:
    return ClaimAnswer(claim=claim)


# --- coordinated disclosure: the maintainer is told first (app/maintainers/embargoed.py) ---------------------------


class DisclosureWindow(Struct, forbid_unknown_fields=True):
    """The repository's disclosure window: findings reported from now on are embargoed this many days (0: none)."""

    days: Annotated[int, Meta(ge=0, le=90)]
    EXAMPLES: ClassVar[list[dict[str, Any]]] = [{"days": 45}]


class DisclosureWindowAnswer(Answer):
    repository: Annotated[str, Meta(description="host/owner/name")]
    disclosure_days: Annotated[int, Meta(ge=0, le=90, description="0: no window (findings are public at once)")]


class EmbargoedFinding(Answer):
    finding: FindingDetail
    disclosure: DisclosureAnswer


class EmbargoedPage(Answer):
    """A repository's embargoed findings in full, for its verified maintainers only (by canonical, cursor-paged)."""

    repository: Annotated[str, Meta(description="host/owner/name")]
    items: list[EmbargoedFinding]
    next_cursor: str | None


class DisclosureClockAnswer(Answer):
    disclosure: DisclosureAnswer


class EmbargoedEntry(Answer):
    """A private entry (never in the change feed): an embargoed finding told to its repository's maintainers."""

    kind: Annotated[str, enum(("finding.embargoed",))]
    at: Annotated[Timestamp, Meta(description="when the finding's clock started")]
    finding: FindingDetail
    disclosure: DisclosureAnswer


class EmbargoedPayload(Answer):
    """The body of a `finding.embargoed` delivery (app/maintainers/delivery.py writes these bytes and signs them)."""

    delivery: Annotated[Uuid, Meta(description="the same as X-Tarakan-Delivery; the same on every retry")]
    entry: EmbargoedEntry
