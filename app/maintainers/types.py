"""The maintainers' API answers as typed structures (docs/domain.md "Maintainers")."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from msgspec import Meta, Struct

from app.kernel.answers import Answer, Timestamp, enum, iso
from app.maintainers.models import CLAIM_STATES
from app.maintainers.service import ClaimView


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


def claim_answer(view: ClaimView) -> ClaimAnswer:
    return ClaimAnswer(
        claim=Claim(
            id=view.id,
            repository=view.repository,
            state=view.state,
            token=view.token,
            path=view.path,
            expires_at=iso(view.expires_at) or "",
            verified_at=iso(view.verified_at),
        )
    )
