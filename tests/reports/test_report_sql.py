"""The SQL a report runs, as it runs: each statement composed across modules (`report_sql`'s insert with the §9 counts
of `policy` and the known canonicals of `assimilation`; the last statement of `app.record.outbox` with the change
feed's entries, the registry's recount and a canonical's `counters`) rendered and held against its checked-in
text in `tests/reports/golden/`. A change to any part shows here as a diff of the whole statement; after reading it,
rewrite the files with `UPDATE_GOLDEN_SQL=1`."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest
from sqlalchemy import TextClause

from app.record.outbox import _settle_statement
from app.registry.metrics import COUNT_NEW_REPORT, RECALCULATE
from app.reports.counters import REFRESH_COUNTERS
from app.reports.report_sql import COUNTED_INSERT_SCAN, EXEMPT_INSERT_SCAN

GOLDEN = Path(__file__).parent / "golden"

STATEMENTS: dict[str, TextClause] = {
    "insert_counted": COUNTED_INSERT_SCAN,
    "insert_exempt": EXEMPT_INSERT_SCAN,
    # the common report: its counts moved by it alone, its known canonicals' counters alongside
    "settle_count_counters": _settle_statement(COUNT_NEW_REPORT, REFRESH_COUNTERS),
    "settle_count": _settle_statement(COUNT_NEW_REPORT, None),
    # a report that moved a canonical's status: counted from source (its counters refreshed before, not alongside)
    "settle_recount": _settle_statement(RECALCULATE, None),
    "settle_counters": _settle_statement(None, REFRESH_COUNTERS),
    "settle": _settle_statement(None, None),
}


@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_the_report_statement_is_its_golden_text(name: str) -> None:
    rendered = STATEMENTS[name].text.strip() + "\n"
    path = GOLDEN / f"{name}.sql"
    if os.environ.get("UPDATE_GOLDEN_SQL") == "1":
        path.write_text(rendered)
    golden = path.read_text() if path.exists() else ""
    diff = "".join(difflib.unified_diff(golden.splitlines(True), rendered.splitlines(True), str(path), "rendered"))
    assert rendered == golden, f"{name} changed (UPDATE_GOLDEN_SQL=1 rewrites it):\n{diff}"


def test_every_golden_file_is_a_statement() -> None:
    assert sorted(p.stem for p in GOLDEN.glob("*.sql")) == sorted(STATEMENTS)
