"""The atlas index's constellation: the top patterns on a golden-angle spiral (docs/domain.md §6.3)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from markupsafe import Markup

from app.infestations.models import UNKNOWN_TITLE
from app.infestations.svg import (
    CHAR_WIDTH,
    LABEL_GAP,
    LABEL_MAX,
    LINE_HEIGHT,
    NARROW_WIDTH,
    LegendEntry,
    int_of,
    short_label,
)
from app.kernel.urls import infestation_path
from app.reports.models import CANONICAL_STATUSES

GOLDEN_ANGLE = math.pi * (3 - math.sqrt(5))  # ~137.5 degrees: successive ranks never line up
STATUS_LABELS = {
    "open": "Mostly open",
    "verified": "Mostly verified",
    "disputed": "Mostly disputed",
    "fixed": "Mostly fixed",
}
ORBIT_RANKS = (5, 12, 30)  # rings through the 5th, 12th and 30th ranks: "top 5", "top 12", "top 30"
NARROW_HEIGHT, NARROW_LABELLED, NARROW_LABEL_MAX = 440, 3, 22


def dominant_status(row: Mapping[str, Any]) -> str:
    """The status holding most instances (ties: open, verified, disputed, fixed); drives a node's colour."""
    counts = {s: int_of(row, f"{s}_count") for s in CANONICAL_STATUSES}
    return max(CANONICAL_STATUSES, key=lambda s: (counts[s], -CANONICAL_STATUSES.index(s)))


def open_share(row: Mapping[str, Any]) -> float:
    total = int_of(row, "instance_count")
    return round(int_of(row, "open_count") / total, 3) if total > 0 else 0.0


@dataclass(frozen=True)
class StarNode:
    rank: int
    pattern_key: str
    title: str
    severity: str | None
    repo_count: int
    instance_count: int
    open_count: int
    open_share: float
    tone: str
    x: float
    y: float
    r: float
    href: str
    aria_label: str
    label: str | None
    label_x: float
    label_y: float
    label_anchor: str
    leader: tuple[float, float, float, float] | None = None  # node edge -> label, for a label set in the margin

    # The SVG geometry as ready attribute runs, as `hub.Satellite` has them: only numbers and this module's own
    # keywords (a status tone, a text-anchor) go in, never text from a row, so there is nothing to escape; titles and
    # hrefs stay autoescaped in the template. One output per element instead of one autoescaped `{{ }}` per number.
    @property
    def ring_attrs(self) -> Markup:
        return Markup(f'cx="{self.x}" cy="{self.y}" r="{self.r + 5}"')

    @property
    def node_attrs(self) -> Markup:
        return Markup(f'class="node tone-{self.tone}" cx="{self.x}" cy="{self.y}" r="{self.r}"')

    @property
    def rank_attrs(self) -> Markup:
        return Markup(f'x="{self.x}" y="{self.y + 4}"')

    @property
    def leader_attrs(self) -> Markup:
        x1, y1, x2, y2 = self.leader or (0.0, 0.0, 0.0, 0.0)
        return Markup(f'x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}"')

    @property
    def label_attrs(self) -> Markup:
        return Markup(f'x="{self.label_x}" y="{self.label_y}" text-anchor="{self.label_anchor}"')


@dataclass(frozen=True)
class Constellation:
    width: int
    height: int
    nodes: tuple[StarNode, ...]
    legend: tuple[LegendEntry, ...]
    orbits: tuple[tuple[float, float], ...]  # (rx, ry) of the rank rings drawn behind the stars
    narrow: Constellation | None = None  # the same rows laid out for a phone (drawn instead below NARROW_SCREEN)


Box = tuple[float, float, float, float]  # x0, y0, x1, y1


def _box_hits_circle(box: Box, x: float, y: float, r: float) -> bool:
    nearest_x, nearest_y = min(max(x, box[0]), box[2]), min(max(y, box[1]), box[3])
    return math.hypot(nearest_x - x, nearest_y - y) < r


def _boxes_overlap(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def place_label(
    text: str,
    x: float,
    y: float,
    r: float,
    *,
    circles: Sequence[tuple[float, float, float]],
    taken: Sequence[Box],
    width: float,
    height: float,
) -> tuple[float, float, str, Box] | None:
    """The first of right, left, above, below and the four diagonals of a node where `text` fits inside the frame,
    clear of every other node and label placed so far: (x, baseline y, text-anchor, box); None when none is clear
    (the label is dropped; the node's <title> and the table still carry the name)."""
    w = len(text) * CHAR_WIDTH
    gap = LABEL_GAP
    d = r * 0.7 + gap  # the diagonal places sit off the node's corner
    candidates = (
        (x + r + gap, y + 4, "start", (x + r + gap, y - LINE_HEIGHT / 2, x + r + gap + w, y + LINE_HEIGHT / 2)),
        (x - r - gap, y + 4, "end", (x - r - gap - w, y - LINE_HEIGHT / 2, x - r - gap, y + LINE_HEIGHT / 2)),
        (x, y - r - gap, "middle", (x - w / 2, y - r - gap - LINE_HEIGHT + 3, x + w / 2, y - r - gap + 3)),
        (x, y + r + gap + 10, "middle", (x - w / 2, y + r + gap - 1, x + w / 2, y + r + gap + LINE_HEIGHT - 1)),
        (x + d, y - d, "start", (x + d, y - d - LINE_HEIGHT + 3, x + d + w, y - d + 3)),
        (x + d, y + d + 10, "start", (x + d, y + d - 1, x + d + w, y + d + LINE_HEIGHT - 1)),
        (x - d, y - d, "end", (x - d - w, y - d - LINE_HEIGHT + 3, x - d, y - d + 3)),
        (x - d, y + d + 10, "end", (x - d - w, y + d - 1, x - d, y + d + LINE_HEIGHT - 1)),
    )
    for lx, ly, anchor, box in candidates:
        inside = box[0] >= 2 and box[1] >= 2 and box[2] <= width - 2 and box[3] <= height - 2
        if (
            inside
            and not any(_box_hits_circle(box, cx, cy, cr + 1) for cx, cy, cr in circles)
            and not any(_boxes_overlap(box, t) for t in taken)
        ):
            return round(lx, 1), round(ly, 1), anchor, tuple(round(v, 1) for v in box)  # type: ignore[return-value]
    return None


def _margin_label(
    text: str, node: StarNode, nodes: Sequence[StarNode], taken: Sequence[Box], *, width: float, height: float
) -> tuple[float, float, Box, tuple[float, float, float, float]] | None:
    """A label in the band above (for a node in the upper half) or below the spiral, on the first free row nearest
    the spiral, centred over its node as far as the frame allows; the leader runs from the node's edge to it."""
    w = len(text) * CHAR_WIDTH
    top = min(n.y - n.r for n in nodes) - 4
    bottom = max(n.y + n.r for n in nodes) + 4
    row = LINE_HEIGHT + 2
    upper = [top - k * row for k in range(int((top - 2) // row))]  # box bottoms, nearest the spiral first
    lower = [bottom + k * row for k in range(int((height - 2 - bottom) // row))]  # box tops
    bands = (upper, lower) if node.y <= height / 2 else (lower, upper)
    x = min(max(node.x, w / 2 + 2), width - w / 2 - 2)
    for band in bands:
        for edge in band:
            box = (
                (x - w / 2, edge - LINE_HEIGHT, x + w / 2, edge)
                if band is upper
                else (x - w / 2, edge, x + w / 2, edge + LINE_HEIGHT)
            )
            if box[0] < 2 or box[1] < 2 or box[2] > width - 2 or box[3] > height - 2:
                continue
            if any(_boxes_overlap(box, t) for t in taken):
                continue
            baseline = box[3] - 3
            toward = (box[3], node.y - node.r) if band is upper else (box[1], node.y + node.r)
            leader = (round(node.x, 1), round(toward[1], 1), round(x, 1), round(toward[0], 1))
            return round(x, 1), round(baseline, 1), tuple(round(v, 1) for v in box), leader  # type: ignore[return-value]
    return None


def constellation_layout(
    items: Sequence[Mapping[str, Any]],
    *,
    limit: int = 50,
    labelled: int = 5,
    width: int = 960,
    height: int = 520,
    label_max: int = LABEL_MAX,
    with_narrow: bool = True,
    margin_labels: bool = False,
) -> Constellation:
    """Ranked patterns on a golden-angle (Vogel) spiral, radius ~ sqrt(repo_count), the first `labelled` labelled where
    a label fits; `narrow` the phone's picture, with `margin_labels` (docs/domain.md §6.3)."""
    rows = list(items)[: max(0, limit)]
    n = len(rows)
    cx, cy = width / 2, height / 2
    # spiral step chosen so the last rank still fits the frame; x is stretched to use a wide frame
    stretch = max(1.0, min(1.7, (cx - 60) / (cy - 44)))
    step = min(80.0, min(cy - 44, (cx - 60) / stretch) / math.sqrt(n + 0.5)) if n else 80.0
    max_r = min(34.0, step * 0.72)
    min_r = 5.0
    top = max((int_of(r, "repo_count") for r in rows), default=1) or 1
    nodes = []
    for i, row in enumerate(rows):
        rho = 0.0 if i == 0 else step * math.sqrt(i + 1.5)
        theta = i * GOLDEN_ANGLE
        x = round(cx + stretch * rho * math.cos(theta), 1)
        y = round(cy + rho * math.sin(theta), 1)
        repos = int_of(row, "repo_count")
        radius = round(min_r + (max_r - min_r) * math.sqrt(max(repos, 0) / top), 1)
        title = str(row.get("title") or UNKNOWN_TITLE)
        key = str(row.get("pattern_key") or "")
        severity = row.get("severity") if isinstance(row.get("severity"), str) else None
        share = open_share(row)
        nodes.append(
            StarNode(
                rank=i + 1,
                pattern_key=key,
                title=title,
                severity=severity,
                repo_count=repos,
                instance_count=int_of(row, "instance_count"),
                open_count=int_of(row, "open_count"),
                open_share=share,
                tone=dominant_status(row),
                x=x,
                y=y,
                r=radius,
                href=infestation_path(key),
                aria_label=(
                    f"#{i + 1} {title}: {repos} repositories, {int_of(row, 'open_count')} open"
                    + (f", {severity}" if severity else "")
                ),
                label=None,
                label_x=x,
                label_y=y,
                label_anchor="start",
            )
        )
    circles = [(node.x, node.y, node.r) for node in nodes]
    taken: list[Box] = []
    for i, node in enumerate(nodes[: max(0, labelled)]):
        text = short_label(node.title, label_max)
        others = circles[:i] + circles[i + 1 :]
        placed = place_label(text, node.x, node.y, node.r, circles=others, taken=taken, width=width, height=height)
        if placed is not None:
            lx, ly, anchor, box = placed
            taken.append(box)
            nodes[i] = replace(node, label=text, label_x=lx, label_y=ly, label_anchor=anchor)
        elif margin_labels:
            # set away from its star, the label starts with the rank the star shows, so a reader can pair them
            text = f"{node.rank} " + short_label(node.title, label_max - len(str(node.rank)) - 1)
            margin = _margin_label(text, node, nodes, taken, width=width, height=height)
            if margin is not None:
                lx, ly, box, leader = margin
                taken.append(box)
                nodes[i] = replace(node, label=text, label_x=lx, label_y=ly, label_anchor="middle", leader=leader)
    tones = [s for s in CANONICAL_STATUSES if any(node.tone == s for node in nodes)] or ["open"]
    legend = tuple(LegendEntry(tone=s, label=STATUS_LABELS[s]) for s in tones)
    orbits = tuple(
        (round(stretch * step * math.sqrt(rank - 1 + 1.5), 1), round(step * math.sqrt(rank - 1 + 1.5), 1))
        for rank in ORBIT_RANKS
        if rank <= n
    )
    narrow = None
    if with_narrow and width > NARROW_WIDTH:
        narrow = constellation_layout(
            rows,
            limit=limit,
            labelled=min(labelled, NARROW_LABELLED),
            width=NARROW_WIDTH,
            height=NARROW_HEIGHT,
            label_max=NARROW_LABEL_MAX,
            with_narrow=False,
            margin_labels=True,
        )
    return Constellation(width=width, height=height, nodes=tuple(nodes), legend=legend, orbits=orbits, narrow=narrow)
