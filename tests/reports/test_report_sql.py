"""The SQL a report runs, as it runs: each statement composed across modules (`report_sql`'s insert with the §9 counts
of `policy` and the known canonicals of `assimilation`; the last statement of `app.record.outbox` with the change
feed's entries, the registry's counts and a canonical's `counters`) rendered and held against its checked-in text in
`tests/reports/golden/report_statements.md`, one section a statement, so a reviewer reads them in one place. A change
to any part shows here as a diff of the whole statement; after reading it, rewrite the file with
`UPDATE_GOLDEN_SQL=1`."""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

import pytest
from sqlalchemy import TextClause

from app.record.outbox import _settle_statement
from app.registry.metrics import COUNT_NEW_REPORT, RECALCULATE
from app.reports.counters import REFRESH_COUNTERS
from app.reports.report_sql import COUNTED_INSERT_SCAN, EXEMPT_INSERT_SCAN

GOLDEN = Path(__file__).parent / "golden" / "report_statements.md"

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

HEADER = (
    "# The statements a report runs\n\n"
    "Rendered from the code by `tests/reports/test_report_sql.py`, which fails when the code renders anything else\n"
    "(`UPDATE_GOLDEN_SQL=1` rewrites this file). The first two insert the report (an account under quotas, an exempt\n"
    "one); the `settle` ones are its last statement, by what rides in it.\n"
)
_SECTION = re.compile(r"^## (\w+)\n\n```sql\n(.*?)```\n", re.MULTILINE | re.DOTALL)


def rendered(name: str) -> str:
    return STATEMENTS[name].text.strip() + "\n"


def golden_file() -> str:
    return HEADER + "".join(f"\n## {name}\n\n```sql\n{rendered(name)}```\n" for name in sorted(STATEMENTS))


def golden_sections() -> dict[str, str]:
    return dict(_SECTION.findall(GOLDEN.read_text())) if GOLDEN.exists() else {}


@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_the_report_statement_is_its_golden_text(name: str) -> None:
    if os.environ.get("UPDATE_GOLDEN_SQL") == "1":
        GOLDEN.write_text(golden_file())
    golden = golden_sections().get(name, "")
    diff = "".join(difflib.unified_diff(golden.splitlines(True), rendered(name).splitlines(True), str(GOLDEN), name))
    assert rendered(name) == golden, f"{name} changed (UPDATE_GOLDEN_SQL=1 rewrites the file):\n{diff}"


def test_the_golden_file_holds_every_statement_and_nothing_else() -> None:
    assert GOLDEN.read_text() == golden_file()
