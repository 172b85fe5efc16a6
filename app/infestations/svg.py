"""Deterministic layouts for the atlas pictures: the constellation (top patterns) and the hub-and-spoke graph.

Pure functions of their input rows: no randomness, no clock, coordinates rounded, so the same data always draws
the same picture (and the HTML stays byte-stable for caches). Templates render the returned dataclasses as inline
SVG with autoescaping; every node carries its link and accessible name here so the table and the picture agree.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from markupsafe import Markup

from app.infestations.models import UNKNOWN_TITLE
from app.kernel.urls import finding_path, infestation_path, repo_path
from app.reports.models import CANONICAL_STATUSES

GOLDEN_ANGLE = math.pi * (3 - math.sqrt(5))  # ~137.5 degrees: successive ranks never line up
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
    counts = {s: _int(row, f"{s}_count") for s in CANONICAL_STATUSES}
    return max(CANONICAL_STATUSES, key=lambda s: (counts[s], -CANONICAL_STATUSES.index(s)))


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
    label_y: float
    label_anchor: str
    leader: tuple[float, float, float, float] | None = None  # node edge -> label, for a label set in the margin


@dataclass(frozen=True)
class Constellation:
    width: int
    height: int
    nodes: tuple[StarNode, ...]
    legend: tuple[LegendEntry, ...]
    orbits: tuple[tuple[float, float], ...]  # (rx, ry) of the rank rings drawn behind the stars
    narrow: Constellation | None = None  # the same rows laid out for a phone (drawn instead below NARROW_SCREEN)


ORBIT_RANKS = (5, 12, 30)  # rings through the 5th, 12th and 30th ranks: "top 5", "top 12", "top 30"

# Labels are 11px monospace (static/css/app.css `.map text`): about 7.2 user units a character with the letter
# spacing, 14 a line. The narrow frame is about as wide as a 390px phone's picture, so 11 units render >= 11px.
CHAR_WIDTH, LINE_HEIGHT, LABEL_GAP = 7.2, 14.0, 6.0
NARROW_WIDTH, NARROW_HEIGHT, NARROW_LABELLED, NARROW_LABEL_MAX = 340, 440, 3, 22

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
    """The first of right, left, above, below and the four diagonals of a node where `text` stays inside the frame and clear of every
    other node and every label placed so far: (x, baseline y, text-anchor, box); None when no place is clear (the
    label is dropped; the node's <title> and the table still carry the name). Deterministic: a fixed order."""
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
    """Ranked patterns on a golden-angle (Vogel) spiral: rank 1 at the centre, each next rank a little further
    out, so rank reads as distance from the core. Radius ~ sqrt(repo_count) (area proportional to spread).
    The first `labelled` ranks get a visible label where one fits clear of every node and label (`place_label`);
    `narrow` is the same picture for a phone: a frame about as wide as the screen, fewer and shorter labels, and
    (`margin_labels`) a label with no room beside its node set in the free band above or below the spiral with a
    leader line to it."""
    rows = list(items)[: max(0, limit)]
    n = len(rows)
    cx, cy = width / 2, height / 2
    # spiral step chosen so the last rank still fits the frame; x is stretched to use a wide frame
    stretch = max(1.0, min(1.7, (cx - 60) / (cy - 44)))
    step = min(80.0, min(cy - 44, (cx - 60) / stretch) / math.sqrt(n + 0.5)) if n else 80.0
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
    label: str  # the slug, shown on hover and keyboard focus (outward of the node, inside the frame)
    label_x: float
    label_y: float
    label_anchor: str
    listed_status: str = "open"  # the membership's status as listed (the table's Status column)
    finding_href: str | None = None  # its sample finding's page, when it has one

    # The SVG geometry as ready attribute runs. Only numbers and this module's own keywords go in (a status tone, a
    # text-anchor), never text from a row, so there is nothing to escape; the slug, href and names stay
    # autoescaped in the template. One output per element instead of one autoescaped `{{ }}` per number keeps the
    # show page's render cost down (96 satellites a render: docs/benchmarks.md, the hot show page's server time).
    @property
    def ring_attrs(self) -> Markup:
        return Markup(f'cx="{self.x}" cy="{self.y}" r="{self.r + 4}"')

    @property
    def node_attrs(self) -> Markup:
        return Markup(f'class="node tone-{self.status}" cx="{self.x}" cy="{self.y}" r="{self.r}"')

    @property
    def label_attrs(self) -> Markup:
        return Markup(f'x="{self.label_x}" y="{self.label_y}" text-anchor="{self.label_anchor}"')


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
    narrow: HubGraph | None = None  # the same graph for a phone (drawn instead below NARROW_SCREEN)

    @property
    def spoke_attrs(self) -> tuple[Markup, ...]:
        """Each satellite's spoke from the hub, as a ready attribute run (numbers only: see `Satellite.ring_attrs`)."""
        start = f'x1="{self.hub_x}" y1="{self.hub_y}"'
        return tuple(Markup(f'{start} x2="{sat.x}" y2="{sat.y}"') for sat in self.satellites)


HUB_STATUS_LABELS = {"open": "Open", "verified": "Verified", "disputed": "Disputed", "fixed": "Fixed"}


def hub_layout(
    infestation: Mapping[str, Any],
    entries: Sequence[Mapping[str, Any]],
    *,
    cap: int = SATELLITE_CAP,
    width: int = 800,
    height: int = 560,
    with_narrow: bool = True,
    links: Sequence[tuple[str, str | None]] | None = None,
) -> HubGraph:
    """The pattern as a hub with up to `cap` repositories on concentric rings (most recent innermost), sized by
    instance count and coloured by their primary status. `more` counts the listed repositories not drawn. Each
    satellite links to its repository page, is named by its <title>, and shows its slug on hover and focus;
    `narrow` is the same graph in a phone-sized frame (smaller nodes, same 11px labels). `links` are the entries'
    (repository page, sample finding page), when the caller already made them (the narrow graph reuses the wide
    one's)."""
    drawn = list(entries)[: min(cap, SATELLITE_CAP)]
    if links is None:
        links = [(repo_path(e.get("host", ""), e.get("owner", ""), e.get("name", "")), _finding_href(e)) for e in drawn]
    cx, cy = width / 2, height / 2
    rings_used = sum(1 for start in itertools.accumulate((0, *RING_CAPACITY[:-1])) if start < len(drawn))
    # spread whatever rings are used across the frame (a small pattern should not huddle around the hub)
    radii = {1: (cy * 0.70,), 2: (cy * 0.50, cy * 0.84)}.get(rings_used, (cy * 0.40, cy * 0.65, cy * 0.88))
    stretch = min(1.25, (cx - 20) / (cy * 0.88))
    scale = max(0.6, min(1.0, width / 800, height / 560))  # node size in a smaller frame
    top = max((_int(e, "instance_count") for e in drawn), default=1) or 1
    satellites = []
    index = 0
    for ring, capacity in enumerate(RING_CAPACITY):
        members = drawn[index : index + capacity]
        member_links = links[index : index + capacity]
        index += capacity
        if not members:
            break
        # spread a partial ring evenly; offset alternate rings so spokes do not overlap
        offset = -math.pi / 2 + (math.pi / len(members) if ring % 2 else 0.0)
        for j, (entry, (href, finding_href)) in enumerate(zip(members, member_links, strict=True)):
            angle = offset + 2 * math.pi * j / len(members)
            status = str(entry.get("status") or "open")
            tone = status if status in CANONICAL_STATUSES else "disputed"
            count = _int(entry, "instance_count")
            slug = f"{entry.get('owner', '')}/{entry.get('name', '')}"
            x = round(cx + stretch * radii[ring] * math.cos(angle), 1)
            y = round(cy + radii[ring] * math.sin(angle), 1)
            r = round((4 + 10 * math.sqrt(max(count, 0) / top)) * scale, 1)
            label, label_x, label_anchor = _outward_label(slug, x, r, cx, width)
            satellites.append(
                Satellite(
                    repository_id=_int(entry, "repository_id"),
                    slug=slug,
                    status=tone,
                    instance_count=count,
                    open_count=_int(entry, "open_count"),
                    x=x,
                    y=y,
                    r=r,
                    href=href,
                    aria_label=f"{slug}: {count} instance{'s' if count != 1 else ''}, {status}",
                    label=label,
                    label_x=label_x,
                    label_y=round(y + 4, 1),
                    label_anchor=label_anchor,
                    listed_status=status,
                    finding_href=finding_href,
                )
            )
    repo_count = _int(infestation, "repo_count")
    title = str(infestation.get("title") or UNKNOWN_TITLE)
    tones = [s for s in CANONICAL_STATUSES if any(sat.status == s for sat in satellites)]
    narrow = None
    if with_narrow and width > NARROW_WIDTH:
        # a phone draws the two inner rings (the 32 most recent); "+N more in ledger" counts the rest
        narrow = hub_layout(
            infestation,
            drawn,
            cap=NARROW_SATELLITES,
            width=NARROW_WIDTH,
            height=NARROW_HUB_HEIGHT,
            with_narrow=False,
            links=links[:NARROW_SATELLITES],
        )
    return HubGraph(
        width=width,
        height=height,
        hub_x=cx,
        hub_y=cy,
        hub_r=round(26.0 * scale, 1),
        hub_label=short_label(title, 24),
        hub_aria_label=f"{title}: {repo_count} repositories; jump to the instance ledger",
        satellites=tuple(satellites),
        more=max(0, repo_count - len(satellites)),
        legend=tuple(LegendEntry(tone=s, label=HUB_STATUS_LABELS[s]) for s in tones),
        narrow=narrow,
    )


def _finding_href(entry: Mapping[str, Any]) -> str | None:
    sample = entry.get("occurrence_public_id")
    return finding_path(sample) if sample else None


NARROW_HUB_HEIGHT = 400
NARROW_SATELLITES = RING_CAPACITY[0] + RING_CAPACITY[1]


def _outward_label(slug: str, x: float, r: float, cx: float, width: float) -> tuple[str, float, str]:
    """A hover label beside its node, on the side away from the hub unless only the other side has room, cut to
    the room there (it shows one at a time, over the picture, with a halo: see `.map .sat-label`)."""
    room_right = width - 2 - (x + r + LABEL_GAP)
    room_left = x - r - LABEL_GAP - 2
    need = len(slug) * CHAR_WIDTH
    outward_room, inward_room = (room_right, room_left) if x >= cx else (room_left, room_right)
    outward = outward_room >= need or outward_room >= inward_room
    right = outward == (x >= cx)
    room = room_right if right else room_left
    text = short_label(slug, max(4, min(LABEL_MAX, int(room // CHAR_WIDTH))))
    return (text, round(x + r + LABEL_GAP, 1), "start") if right else (text, round(x - r - LABEL_GAP, 1), "end")
