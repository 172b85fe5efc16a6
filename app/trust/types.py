"""The answers of earned trust: an account's own signal, and the public precision rows."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from app.kernel.answers import Answer

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
