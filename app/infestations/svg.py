"""Deterministic layouts for the atlas pictures: the constellation (top patterns) and the hub-and-spoke graph.

Pure functions of their input rows: no randomness, no clock, coordinates rounded, so the same data always draws
the same picture (and the HTML stays byte-stable for caches). Templates render the returned dataclasses as inline
SVG with autoescaping; every node carries its link and accessible name here so the table and the picture agree.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.kernel.urls import infestation_path, repo_path

GOLDEN_ANGLE = math.pi * (3 - math.sqrt(5))  # ~137.5 degrees: successive ranks never line up
STATUSES = ("open", "verified", "disputed", "fixed")  # tie order when picking a dominant status
STATUS_LABELS = {
    "open": "Mostly open",
    "verified": "Mostly verified",
    "disputed": "Mostly disputed",
    "fixed": "Mostly fixed",
}
SATELLITE_CAP = 64
# satellites per ring, innermost first (sums to the cap); rings hold more as they grow
RING_CAPACITY = (12, 20, 32)
LABEL_MAX = 30


def short_label(text: str, limit: int = LABEL_MAX) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _int(row: Mapping[str, Any], key: str) -> int:
    value = row.get(key)
    return int(value) if isinstance(value, int) else 0


def dominant_status(row: Mapping[str, Any]) -> str:
    """The status holding most instances (ties: open, verified, disputed, fixed); drives a node's colour."""
    counts = {s: _int(row, f"{s}_count") for s in STATUSES}
    return max(STATUSES, key=lambda s: (counts[s], -STATUSES.index(s)))


def open_share(row: Mapping[str, Any]) -> float:
    total = _int(row, "instance_count")
    return round(_int(row, "open_count") / total, 3) if total > 0 else 0.0


@dataclass(frozen=True)
class LegendEntry:
    tone: str
    label: str


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
    label_anchor: str


@dataclass(frozen=True)
class Constellation:
    width: int
    height: int
    nodes: tuple[StarNode, ...]
    legend: tuple[LegendEntry, ...]
    orbits: tuple[tuple[float, float], ...]  # (rx, ry) of the rank rings drawn behind the stars


ORBIT_RANKS = (5, 12, 30)  # rings through the 5th, 12th and 30th ranks: "top 5", "top 12", "top 30"


def constellation_layout(
    items: Sequence[Mapping[str, Any]], *, limit: int = 50, labelled: int = 5, width: int = 960, height: int = 520
) -> Constellation:
    """Ranked patterns on a golden-angle (Vogel) spiral: rank 1 at the centre, each next rank a little further
    out, so rank reads as distance from the core. Radius ~ sqrt(repo_count) (area proportional to spread)."""
    rows = list(items)[: max(0, limit)]
    n = len(rows)
    cx, cy = width / 2, height / 2
    # spiral step chosen so the last rank still fits vertically; x is stretched to use the wide frame
    step = min(80.0, (cy - 44) / math.sqrt(n + 0.5)) if n else 80.0
    stretch = min(1.7, (cx - 60) / (cy - 44))
    max_r = min(34.0, step * 0.72)
    min_r = 5.0
    top = max((_int(r, "repo_count") for r in rows), default=1) or 1
    nodes = []
    for i, row in enumerate(rows):
        rho = 0.0 if i == 0 else step * math.sqrt(i + 1.5)
        theta = i * GOLDEN_ANGLE
        x = round(cx + stretch * rho * math.cos(theta), 1)
        y = round(cy + rho * math.sin(theta), 1)
        repos = _int(row, "repo_count")
        radius = round(min_r + (max_r - min_r) * math.sqrt(max(repos, 0) / top), 1)
        title = str(row.get("title") or "Unknown pattern")
        key = str(row.get("pattern_key") or "")
        severity = row.get("severity") if isinstance(row.get("severity"), str) else None
        share = open_share(row)
        label = short_label(title) if i < labelled else None
        right = x <= cx
        nodes.append(
            StarNode(
                rank=i + 1,
                pattern_key=key,
                title=title,
                severity=severity,
                repo_count=repos,
                instance_count=_int(row, "instance_count"),
                open_count=_int(row, "open_count"),
                open_share=share,
                tone=dominant_status(row),
                x=x,
                y=y,
                r=radius,
                href=infestation_path(key),
                aria_label=(
                    f"#{i + 1} {title}: {repos} repositories, {_int(row, 'open_count')} open"
                    + (f", {severity}" if severity else "")
                ),
                label=label,
                label_x=round(x + radius + 6 if right else x - radius - 6, 1),
                label_anchor="start" if right else "end",
            )
        )
    tones = [s for s in STATUSES if any(node.tone == s for node in nodes)] or ["open"]
    legend = tuple(LegendEntry(tone=s, label=STATUS_LABELS[s]) for s in tones)
    orbits = tuple(
        (round(stretch * step * math.sqrt(rank - 1 + 1.5), 1), round(step * math.sqrt(rank - 1 + 1.5), 1))
        for rank in ORBIT_RANKS
        if rank <= n
    )
    return Constellation(width=width, height=height, nodes=tuple(nodes), legend=legend, orbits=orbits)


@dataclass(frozen=True)
class Satellite:
    repository_id: int
    slug: str
    status: str
    instance_count: int
    open_count: int
    x: float
    y: float
    r: float
    href: str
    aria_label: str


@dataclass(frozen=True)
class HubGraph:
    width: int
    height: int
    hub_x: float
    hub_y: float
    hub_r: float
    hub_label: str
    hub_aria_label: str
    satellites: tuple[Satellite, ...]
    more: int
    legend: tuple[LegendEntry, ...]


HUB_STATUS_LABELS = {"open": "Open", "verified": "Verified", "disputed": "Disputed", "fixed": "Fixed"}


def hub_layout(
    infestation: Mapping[str, Any],
    entries: Sequence[Mapping[str, Any]],
    *,
    cap: int = SATELLITE_CAP,
    width: int = 800,
    height: int = 560,
) -> HubGraph:
    """The pattern as a hub with up to `cap` repositories on concentric rings (most recent innermost), sized by
    instance count and coloured by their primary status. `more` counts the listed repositories not drawn."""
    drawn = list(entries)[: min(cap, SATELLITE_CAP)]
    cx, cy = width / 2, height / 2
    rings_used = sum(1 for start in itertools.accumulate((0, *RING_CAPACITY[:-1])) if start < len(drawn))
    # spread whatever rings are used across the frame (a small pattern should not huddle around the hub)
    radii = {1: (cy * 0.70,), 2: (cy * 0.50, cy * 0.84)}.get(rings_used, (cy * 0.40, cy * 0.65, cy * 0.88))
    stretch = 1.25
    top = max((_int(e, "instance_count") for e in drawn), default=1) or 1
    satellites = []
    index = 0
    for ring, capacity in enumerate(RING_CAPACITY):
        members = drawn[index : index + capacity]
        index += capacity
        if not members:
            break
        # spread a partial ring evenly; offset alternate rings so spokes do not overlap
        offset = -math.pi / 2 + (math.pi / len(members) if ring % 2 else 0.0)
        for j, entry in enumerate(members):
            angle = offset + 2 * math.pi * j / len(members)
            status = str(entry.get("status") or "open")
            tone = status if status in STATUSES else "disputed"
            count = _int(entry, "instance_count")
            slug = f"{entry.get('owner', '')}/{entry.get('name', '')}"
            satellites.append(
                Satellite(
                    repository_id=_int(entry, "repository_id"),
                    slug=slug,
                    status=tone,
                    instance_count=count,
                    open_count=_int(entry, "open_count"),
                    x=round(cx + stretch * radii[ring] * math.cos(angle), 1),
                    y=round(cy + radii[ring] * math.sin(angle), 1),
                    r=round(4 + 10 * math.sqrt(max(count, 0) / top), 1),
                    href=repo_path(entry.get("host", ""), entry.get("owner", ""), entry.get("name", "")),
                    aria_label=f"{slug}: {count} instance{'s' if count != 1 else ''}, {status}",
                )
            )
    repo_count = _int(infestation, "repo_count")
    title = str(infestation.get("title") or "Unknown pattern")
    tones = [s for s in STATUSES if any(sat.status == s for sat in satellites)]
    return HubGraph(
        width=width,
        height=height,
        hub_x=cx,
        hub_y=cy,
        hub_r=26.0,
        hub_label=short_label(title, 24),
        hub_aria_label=f"{title}: {repo_count} repositories; jump to the instance ledger",
        satellites=tuple(satellites),
        more=max(0, repo_count - len(satellites)),
        legend=tuple(LegendEntry(tone=s, label=HUB_STATUS_LABELS[s]) for s in tones),
    )
