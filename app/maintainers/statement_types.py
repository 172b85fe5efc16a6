"""Maintainers' statements as typed answers (docs/domain.md "Maintainers"): the statement API's answer and request
body, the `maintainer_statement` every finding answer carries and the `maintainers` of a repository's record."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, ClassVar

from msgspec import Meta, Struct, structs

from app.kernel.answers import Answer, Sha, Timestamp, Uuid, enum, iso
from app.maintainers.models import VEX_JUSTIFICATIONS, VEX_STATUSES
from app.maintainers.queries import Maintainer
from app.maintainers.statement_queries import StatementView
from app.maintainers.statements import MAX_TEXT

VexStatus = Annotated[str, enum(VEX_STATUSES, "OpenVEX status")]
VexJustification = Annotated[str, enum(VEX_JUSTIFICATIONS, "OpenVEX justification (not_affected only)")]
Author = Annotated[str | None, Meta(description="the maintainer's handle (null once the account is gone)")]


class MaintainerStatement(Answer):
    """The maintainer's current OpenVEX statement on the finding (the newest one a moderator has not hidden). It
    never changes the reviewers' status: both are shown side by side."""

    status: VexStatus
    justification: VexJustification | None
    impact_statement: str | None
    action_statement: str | None
    fixed_in: Annotated[Sha | None, Meta(description="fixed only: the fixing commit")]
    author: Author
    at: Timestamp


class Statement(Answer):
    """A statement as recorded."""

    id: int
    canonical: Annotated[Uuid, Meta(description="the canonical finding's public id")]
    status: VexStatus
    justification: VexJustification | None
    impact_statement: str | None
    action_statement: str | None
    fixed_in: Sha | None
    author: Author
    at: Timestamp


class StatementAnswer(Answer):
    statement: Statement


class StatementSubmission(Struct, kw_only=True):
    """A maintainer's statement (OpenVEX rules: not_affected needs a justification or an impact_statement, and only
    not_affected takes them; affected needs an action_statement; fixed_in only with fixed). Texts are scanned for
    secrets like reports."""

    EXAMPLES: ClassVar[list[dict[str, Any]]] = [
        {
            "status": "not_affected",
            "justification": "vulnerable_code_not_in_execute_path",
            "impact_statement": "The parser is only reached from the admin CLI, never from a request.",
        },
        {"status": "fixed", "fixed_in": "0123456789abcdef0123456789abcdef01234567"},
    ]

    status: VexStatus
    justification: VexJustification | None = None
    impact_statement: Annotated[str, Meta(max_length=MAX_TEXT)] | None = None
    action_statement: Annotated[str, Meta(max_length=MAX_TEXT)] | None = None
    fixed_in: Annotated[str, Meta(pattern="^[0-9a-fA-F]{40}$")] | None = None


class RepositoryMaintainerEntry(Answer):
    """A current verified maintainer of the repository."""

    handle: str
    since: Timestamp


def maintainer_statement(view: StatementView | None) -> MaintainerStatement | None:
    if view is None:
        return None
    return MaintainerStatement(
        status=view.status,
        justification=view.justification,
        impact_statement=view.impact_statement,
        action_statement=view.action_statement,
        fixed_in=view.fixed_in,
        author=view.author,
        at=iso(view.at) or "",
    )


def statement_answer(view: StatementView) -> StatementAnswer:
    current = maintainer_statement(view)
    assert current is not None
    return StatementAnswer(statement=Statement(id=view.id, canonical=view.canonical, **structs.asdict(current)))


def repository_maintainers(maintainers: Iterable[Maintainer]) -> list[RepositoryMaintainerEntry]:
    return [RepositoryMaintainerEntry(handle=m.handle, since=iso(m.since) or "") for m in maintainers]
