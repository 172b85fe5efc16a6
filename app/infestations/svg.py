"""What the atlas pictures share (constellation.py, hub.py): labels, legends, the narrow frame. Layouts are pure and
deterministic, so the same rows draw the same picture (docs/domain.md §6.3)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LABEL_MAX = 30
# Labels are 11px monospace (static/css/app.css `.map text`): about 7.2 user units a character with the letter
# spacing, 14 a line. The narrow frame is about as wide as a 390px phone's picture, so 11 units render >= 11px.
CHAR_WIDTH, LINE_HEIGHT, LABEL_GAP = 7.2, 14.0, 6.0
NARROW_WIDTH = 340


def short_label(text: str, limit: int = LABEL_MAX) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def int_of(row: Mapping[str, Any], key: str) -> int:
    value = row.get(key)
    return int(value) if isinstance(value, int) else 0


@dataclass(frozen=True)
class LegendEntry:
    tone: str
    label: str
