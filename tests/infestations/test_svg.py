"""The atlas layouts are pure and deterministic, stay inside their frame, and carry links and accessible names."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest

from app.infestations.constellation import Constellation, constellation_layout
from app.infestations.hub import SATELLITE_CAP, hub_layout
from app.infestations.routes import drawn_affected
from app.infestations.svg import CHAR_WIDTH
from app.kernel.templating import environment
from app.kernel.urls import repo_path
from app.seed_data import DEMO_PATTERNS
from e2e.seed import HOSTILE_NAME, HOSTILE_TITLE
from e2e.soup import attr, attrs, one, soup


def pattern(rank: int, repos: int, *, open_count: int | None = None, fixed: int = 0) -> dict[str, Any]:
    opened = repos if open_count is None else open_count
    return {
        "pattern_key": f"{rank:064x}",
        "title": f"Pattern number {rank}",
        "severity": "high",
        "repo_count": repos,
        "instance_count": opened + fixed,
        "open_count": opened,
        "verified_count": 0,
        "fixed_count": fixed,
        "disputed_count": 0,
    }


def repo(i: int, *, instances: int = 1, status: str = "open") -> dict[str, Any]:
    return {
        "repository_id": i,
        "host": "github.com",
        "owner": "acme",
        "name": f"r{i}",
        "status": status,
        "instance_count": instances,
        "open_count": instances if status == "open" else 0,
    }


def test_constellation_is_deterministic_and_ranked_outward() -> None:
    items = [pattern(i, 40 - i) for i in range(30)]
    first = constellation_layout(items)
    assert first == constellation_layout([dict(i) for i in items])
    cx, cy = first.width / 2, first.height / 2
    distances = [math.hypot(n.x - cx, n.y - cy) for n in first.nodes]
    assert distances[0] == 0
    # spiral radius grows with rank (x is stretched, so compare the unstretched radius)
    radial = [math.hypot((n.x - cx) / 1.7, n.y - cy) for n in first.nodes]
    assert all(a <= b + 0.5 for a, b in itertools.pairwise(radial[1:]))


def test_constellation_nodes_fit_the_frame_and_do_not_overlap() -> None:
    for count in (1, 2, 12, 30, 50):
        layout = constellation_layout([pattern(i, 100 - i) for i in range(count)], limit=50)
        assert len(layout.nodes) == count
        for node in layout.nodes:
            assert node.r <= node.x <= layout.width - node.r
            assert node.r <= node.y <= layout.height - node.r
        for a, b in itertools.combinations(layout.nodes, 2):
            assert math.hypot(a.x - b.x, a.y - b.y) >= a.r + b.r, (count, a.rank, b.rank)


def test_constellation_sizes_colours_and_labels() -> None:
    items = [
        pattern(1, 50),
        pattern(2, 25, open_count=1, fixed=10),
        pattern(3, 5),
        pattern(4, 4),
        pattern(5, 3),
        pattern(6, 2),
        pattern(7, 2),
    ]
    layout = constellation_layout(items)
    radii = [n.r for n in layout.nodes]
    assert radii == sorted(radii, reverse=True) and radii[0] > radii[2]
    assert [n.tone for n in layout.nodes[:3]] == ["open", "fixed", "open"]
    assert [n.label is not None for n in layout.nodes] == [True] * 5 + [False] * 2
    assert [e.tone for e in layout.legend] == ["open", "fixed"]
    assert layout.nodes[0].href == f"/infestations/{1:064x}"
    assert layout.nodes[0].aria_label == "#1 Pattern number 1: 50 repositories, 50 open, high"
    assert constellation_layout(items, limit=3).nodes[-1].rank == 3
    assert constellation_layout([]).nodes == ()


def test_hub_caps_satellites_and_counts_the_rest() -> None:
    entries = [repo(i, instances=1 + i % 7, status=("open", "fixed", "verified", "weird")[i % 4]) for i in range(80)]
    graph = hub_layout({"title": "Hub", "repo_count": 100}, entries)
    assert len(graph.satellites) == SATELLITE_CAP == 64
    assert graph.more == 36
    assert graph == hub_layout({"title": "Hub", "repo_count": 100}, [dict(e) for e in entries])
    for sat in graph.satellites:
        assert sat.r <= sat.x <= graph.width - sat.r and sat.r <= sat.y <= graph.height - sat.r
    for a, b in itertools.combinations(graph.satellites, 2):
        assert math.hypot(a.x - b.x, a.y - b.y) >= a.r + b.r
    assert {s.status for s in graph.satellites} == {"open", "fixed", "verified", "disputed"}
    biggest = max(graph.satellites, key=lambda s: s.instance_count)
    smallest = min(graph.satellites, key=lambda s: s.instance_count)
    assert biggest.r > smallest.r
    small = hub_layout({"title": "Hub", "repo_count": 3}, entries[:3])
    assert (len(small.satellites), small.more) == (3, 0)
    assert hub_layout({"title": "Hub", "repo_count": 64}, entries[:64]).more == 0


def test_hostile_text_is_escaped_in_the_rendered_svg() -> None:
    items = [pattern(1, 3) | {"title": HOSTILE_TITLE}]
    template = environment.get_template("infestations/_constellation.svg.html")
    html = template.render(constellation=constellation_layout(items))
    assert "<script>" not in html and "&lt;script&gt;" in html
    graph = hub_layout({"title": HOSTILE_TITLE, "repo_count": 1}, [repo(1) | {"name": HOSTILE_NAME}])
    hub_html = environment.get_template("infestations/_hub.svg.html").render(graph=graph)
    assert "<svg onload" not in hub_html
    page = soup(hub_html)
    for variant in ("wide", "narrow"):  # the same graph twice: the wide picture and the phone's
        assert attrs(page, f"svg.map--{variant} a.satellite", "href") == [repo_path("github.com", "acme", HOSTILE_NAME)]
        assert attrs(page, f"svg.map--{variant} a.satellite", "aria-label") == [
            f"acme/{HOSTILE_NAME}: 1 instance, open"
        ]
    assert len(page.select("svg")) == 2 and not page.select("svg svg")


def label_box(node: Any) -> tuple[float, float, float, float]:
    """Where a label's text sits, from what the template draws (x, baseline y, text-anchor), 11px monospace."""
    w = len(node.label) * CHAR_WIDTH
    x0 = {"start": node.label_x, "end": node.label_x - w, "middle": node.label_x - w / 2}[node.label_anchor]
    return x0, node.label_y - 11, x0 + w, node.label_y + 3


def overlaps(layout: Constellation) -> list[str]:
    found = []
    labelled = [n for n in layout.nodes if n.label]
    for node in labelled:
        x0, y0, x1, y1 = label_box(node)
        if x0 < 0 or y0 < 0 or x1 > layout.width or y1 > layout.height:
            found.append(f"label {node.rank} leaves the frame")
        for other in layout.nodes:
            nearest = (min(max(other.x, x0), x1), min(max(other.y, y0), y1))
            if other is not node and math.hypot(nearest[0] - other.x, nearest[1] - other.y) < other.r:
                found.append(f"label {node.rank} covers node {other.rank}")
    for a, b in itertools.combinations(labelled, 2):
        (ax0, ay0, ax1, ay1), (bx0, by0, bx1, by1) = label_box(a), label_box(b)
        if ax0 < bx1 and bx0 < ax1 and ay0 < by1 and by0 < ay1:
            found.append(f"labels {a.rank} and {b.rank} overlap")
    return found


def demo_atlas() -> list[dict[str, Any]]:
    """The demo seed's patterns ranked as the atlas ranks them (docs/domain.md §10)."""
    items = [
        {
            "pattern_key": f"{i:064x}",
            "title": title,
            "severity": severity,
            "repo_count": len(statuses),
            "instance_count": len(statuses),
            **{f"{s}_count": statuses.count(s) for s in ("open", "verified", "fixed", "disputed")},
        }
        for i, (title, severity, statuses) in enumerate(DEMO_PATTERNS)
    ]
    return sorted(items, key=lambda item: -item["repo_count"])


@pytest.mark.parametrize(
    "items",
    [
        demo_atlas(),
        demo_atlas()[:12],
        [pattern(i, 40) | {"title": f"A rather long pattern title number {i} that gets cut"} for i in range(50)],
        [pattern(i, 2 + (i % 3)) | {"title": "W" * 40} for i in range(30)],
        [pattern(i, 100 - i) for i in range(3)],
    ],
    ids=["demo", "demo-home", "dense-50", "dense-30-wide-glyphs", "three"],
)
def test_constellation_labels_cover_no_node_and_no_label(items: list[dict[str, Any]]) -> None:
    for labelled in (5, 12):
        layout = constellation_layout(items, limit=50, labelled=labelled)
        assert layout.narrow is not None
        for picture in (layout, layout.narrow):
            assert overlaps(picture) == [], (picture.width, labelled)
            assert layout == constellation_layout([dict(i) for i in items], limit=50, labelled=labelled)
        # a dropped label leaves the name to the node's accessible name (its <title>) and the table
        assert all(n.title in n.aria_label for n in layout.nodes)


def test_demo_labels_are_placed_not_all_dropped() -> None:
    layout = constellation_layout(demo_atlas(), limit=30)
    assert sum(1 for n in layout.nodes if n.label) >= 4  # of the 5 asked for: one has no clear place
    assert layout.narrow is not None and 1 <= sum(1 for n in layout.narrow.nodes if n.label) <= 3


def test_satellites_carry_a_label_a_link_and_stay_in_the_frame() -> None:
    entries = [repo(i) | {"name": f"a-rather-long-repository-name-{i}"} for i in range(64)]
    graph = hub_layout({"title": "Hub", "repo_count": 80}, entries)
    assert graph.narrow is not None and len(graph.narrow.satellites) == 32 and graph.narrow.more == 80 - 32
    for g in (graph, graph.narrow):
        for sat in g.satellites:
            assert sat.href == repo_path("github.com", "acme", sat.slug.split("/")[1])
            assert sat.label == sat.slug or (sat.label.endswith("…") and sat.slug.startswith(sat.label[:-1]))
            w = len(sat.label) * CHAR_WIDTH
            x0 = sat.label_x if sat.label_anchor == "start" else sat.label_x - w
            assert x0 >= 0 and x0 + w <= g.width, (g.width, sat.slug)
            assert sat.r <= sat.x <= g.width - sat.r and sat.r <= sat.y <= g.height - sat.r


def test_the_drawn_hub_is_the_layouts_geometry_with_status_and_links() -> None:
    """The template draws each satellite's spoke, focus ring, node and label from the layout's numbers (ready
    attribute runs), and the satellite carries what the table beside it shows: listed status and finding link."""
    statuses = ("open", "fixed", "verified", "an unknown <status>")
    entries = [
        repo(i, instances=i % 5 + 1, status=statuses[i % 4]) | {"occurrence_public_id": f"{i:08d}" if i % 3 else None}
        for i in range(40)
    ]
    graph = hub_layout({"title": "Hub", "repo_count": 40}, entries)
    assert graph.narrow is not None
    page = soup(environment.get_template("infestations/_hub.svg.html").render(graph=graph))
    for variant, g in (("wide", graph), ("narrow", graph.narrow)):
        svg = one(page, f"svg.map--{variant}")
        spokes = [(float(attr(s, "x2")), float(attr(s, "y2"))) for s in svg.select("line.spoke")]
        assert spokes == [(sat.x, sat.y) for sat in g.satellites]
        assert {(attr(s, "x1"), attr(s, "y1")) for s in svg.select("line.spoke")} == {(str(g.hub_x), str(g.hub_y))}
        for a, sat in zip(svg.select("a.satellite"), g.satellites, strict=True):
            ring, node = a.select("circle")
            assert [float(attr(ring, k)) for k in ("cx", "cy", "r")] == [sat.x, sat.y, sat.r + 4]
            assert [float(attr(node, k)) for k in ("cx", "cy", "r")] == [sat.x, sat.y, sat.r]
            assert node.get("class") == ["node", f"tone-{sat.status}"]
            label = one(a, "text")
            assert (float(attr(label, "x")), float(attr(label, "y")), attr(label, "text-anchor")) == (
                sat.label_x,
                sat.label_y,
                sat.label_anchor,
            )
            assert label.get_text() == sat.label
    for i, sat in enumerate(graph.satellites):
        assert sat.listed_status == statuses[i % 4]
        assert sat.status == (statuses[i % 4] if i % 4 < 3 else "disputed")
        assert sat.finding_href == (f"/findings/{i:08d}" if i % 3 else None)
    assert [s.finding_href for s in graph.narrow.satellites] == [s.finding_href for s in graph.satellites[:32]]


def test_the_affected_section_is_drawn_once_per_distinct_satellites_and_count() -> None:
    """Every ledger page of a pattern shows the same "Affected repositories": drawn once, and drawn again as soon as
    anything it shows changes (a satellite's status, the pattern's repository count)."""
    entries = [repo(i, instances=1 + i % 3) for i in range(70)]
    first = drawn_affected({"title": "Hub", "repo_count": 70}, entries)
    assert drawn_affected({"title": "Hub", "repo_count": 70}, [dict(e) for e in entries]) is first
    page = soup(first)
    assert len(page.select("table#affected tbody tr")) == 64 and "+6 more in ledger" in page.get_text()
    fixed = [entries[0] | {"status": "fixed"}, *entries[1:]]
    again = soup(drawn_affected({"title": "Hub", "repo_count": 70}, fixed))
    assert [td.get_text() for td in again.select("table#affected td.status")][:2] == ["fixed", "open"]
    assert "+7 more in ledger" in soup(drawn_affected({"title": "Hub", "repo_count": 71}, entries)).get_text()
