"""The show page's hub-and-spoke graph: the pattern as a hub, its repositories on rings (docs/domain.md §6.5)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from app.infestations.models import UNKNOWN_TITLE
from app.infestations.svg import CHAR_WIDTH, LABEL_GAP, LABEL_MAX, NARROW_WIDTH, LegendEntry, int_of, short_label
from app.kernel.urls import finding_path, repo_path
from app.reports.models import CANONICAL_STATUSES

SATELLITE_CAP = 64
# satellites per ring, innermost first (sums to the cap); rings hold more as they grow
RING_CAPACITY = (12, 20, 32)


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
    """The pattern as a hub with up to `cap` repositories on rings, most recent innermost (docs/domain.md §6.5).
    `links`: the entries' (repository page, sample finding page) when already made (the narrow graph reuses them)."""
    drawn = list(entries)[: min(cap, SATELLITE_CAP)]
    if links is None:
        links = [(repo_path(e.get("host", ""), e.get("owner", ""), e.get("name", "")), _finding_href(e)) for e in drawn]
    cx, cy = width / 2, height / 2
    rings_used = sum(1 for start in itertools.accumulate((0, *RING_CAPACITY[:-1])) if start < len(drawn))
    # spread whatever rings are used across the frame (a small pattern should not huddle around the hub)
    radii = {1: (cy * 0.70,), 2: (cy * 0.50, cy * 0.84)}.get(rings_used, (cy * 0.40, cy * 0.65, cy * 0.88))
    stretch = min(1.25, (cx - 20) / (cy * 0.88))
    scale = max(0.6, min(1.0, width / 800, height / 560))  # node size in a smaller frame
    top = max((int_of(e, "instance_count") for e in drawn), default=1) or 1
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
            count = int_of(entry, "instance_count")
            slug = f"{entry.get('owner', '')}/{entry.get('name', '')}"
            x = round(cx + stretch * radii[ring] * math.cos(angle), 1)
            y = round(cy + radii[ring] * math.sin(angle), 1)
            r = round((4 + 10 * math.sqrt(max(count, 0) / top)) * scale, 1)
            label, label_x, label_anchor = _outward_label(slug, x, r, cx, width)
            satellites.append(
                Satellite(
                    repository_id=int_of(entry, "repository_id"),
                    slug=slug,
                    status=tone,
                    instance_count=count,
                    open_count=int_of(entry, "open_count"),
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
    repo_count = int_of(infestation, "repo_count")
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
