"""The atlas index draws its constellation once per distinct top rows (app.infestations.routes.index_constellation):
the same picture `constellation_layout` draws, and a row that changed draws a new one."""

from __future__ import annotations

from typing import Any

from app.infestations import routes
from app.infestations.constellation import constellation_layout


def _rows(n: int) -> list[dict[str, Any]]:
    return [
        {
            "pattern_key": f"{i:064x}",
            "title": f"Pattern <{i}>",
            "severity": "high" if i % 2 else None,
            "repo_count": 100 - i,
            "instance_count": 200 - i,
            "open_count": 50 - i,
            "verified_count": i,
            "fixed_count": i % 3,
            "disputed_count": i % 5,
        }
        for i in range(n)
    ]


def test_the_kept_picture_is_the_one_drawn_for_the_same_rows() -> None:
    rows = _rows(40)
    first = routes.index_constellation(rows)
    assert first == constellation_layout(rows, limit=routes.CONSTELLATION_TOP)
    assert routes.index_constellation([dict(row) for row in rows]) is first, "equal rows: the kept picture"
    below = [*rows[:30], *_rows(45)[30:]]
    assert routes.index_constellation(below) is first, "rows past the picture's top do not draw it again"
    for field, value in (("repo_count", 7), ("fixed_count", 99), ("title", "Renamed"), ("severity", "low")):
        changed = [dict(row) for row in rows]
        changed[3][field] = value
        redrawn = routes.index_constellation(changed)
        assert redrawn == constellation_layout(changed, limit=routes.CONSTELLATION_TOP) != first, field
