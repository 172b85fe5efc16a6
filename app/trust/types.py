"""The answers of earned trust: an account's own signal, and the public precision rows."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from app.kernel.answers import UNSET, Answer, Sha, Timestamp, UnsetType, Uuid

Precision = Annotated[float, Meta(ge=0, le=1, description="(verified + 2) / (decided + 4)")]
Month = Annotated[str, Meta(pattern="^[0-9]{4}-[0-9]{2}$")]


class SignalCounts(Answer):
    precision: Precision
    decided: int
    verified: int
    disputed: int
    withdrawn: int
    refused: int
    gated: Annotated[bool, Meta(description="new findings are held for review until a reviewer or maintainer acts")]
    reasons: list[str]


class SignalAnswer(Answer):
    signal: SignalCounts


class ProvenanceRow(Answer):
    provenance: str
    month: Month
    decided: int
    verified: int
    precision: Precision


class ModelRow(Answer):
    model: str
    prompt_version: str
    month: Month
    decided: int
    verified: int
    precision: Precision


class ToolRuleRow(Answer):
    tool: str
    rule_id: str
    month: Month
    decided: int
    verified: int
    precision: Precision


class PrecisionAnswer(Answer):
    by_provenance: list[ProvenanceRow]
    by_model: list[ModelRow]
    by_tool_rule: list[ToolRuleRow]


class HeldFinding(Answer):
    public_id: Uuid
    canonical_public_id: Uuid
    repository: Annotated[str, Meta(description="HOST/OWNER/NAME")]
    title: str
    severity: str
    file: str
    line_start: int | None
    line_end: int | None
    commit_sha: Sha
    reported_at: Timestamp
    reporter: Annotated[str | UnsetType, Meta(description="moderators only")] = UNSET
    reporter_precision: Annotated[float | UnsetType, Meta(description="moderators only")] = UNSET


class ReviewQueue(Answer):
    items: list[HeldFinding]
    next_cursor: str | None
