"""One way to compose SQL (docs/architecture.md "Composing SQL"): no module under app/ or jobs/ builds SQL by string
formatting; only `app.kernel.sql` fills SQL text, and it refuses a missing or leftover slot."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from sqlalchemy import Uuid, bindparam, column, or_, table

from app.kernel import sql
from app.kernel.sql import Fragment, Name, SlotError, Window, compose, join, outer
from app.record.public import visible_pattern

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("app", "jobs")
HELPER = Path("app/kernel/sql.py")
# Calls whose argument is run as SQL: it must be a plain string literal (or a module constant holding one).
SQL_SINKS = {"text", "literal_column", "exec_driver_sql", "Fragment", "outer"}

# Uppercase SQL keywords (case-sensitive, so English prose rarely matches) and a few lowercase SQL shapes.
_SQL = re.compile(
    r"\b(SELECT|INSERT INTO|UPDATE|DELETE FROM|WHERE|JOIN|EXISTS|GROUP BY|ORDER BY|FILTER|RETURNING|ON CONFLICT"
    r"|CASE WHEN|LIMIT|OFFSET|AND|OR|NOT|IS NULL|IS NOT NULL|DISTINCT|COALESCE|INTERVAL|CAST|SET|DESC|ASC|UNION"
    r"|VALUES|LATERAL|ANY)\b"
    r"|\b(count|max|min|sum|coalesce|now|nextval|unnest)\(|::[a-z]+\b|\b[a-z_]+\.[a-z_]+ (=|<>|<|>|<=|>=|IN) "
    r"|(^|[\s(,=])[a-z_]+ (=|<>|<=|>=) (:[a-z_]+|'[^']*')|[=<>(,] ?:[a-z_]+\b"
)


def looks_like_sql(value: str) -> bool:
    return bool(_SQL.search(value))


class _Module:
    """One parsed module and its module-level string constants, as far as they can be read without running it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tree = ast.parse(path.read_text(), filename=str(path))
        self.assigned: dict[str, ast.expr] = {}
        for node in self.tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                self.assigned[node.targets[0].id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                self.assigned[node.target.id] = node.value

    def text_of(self, node: ast.expr, depth: int = 0) -> str | None:
        """The string a node evaluates to, with formatted values as `x`; None when it cannot be told."""
        if depth > 8:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):
            return "".join(
                v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "x" for v in node.values
            )
        if isinstance(node, ast.Name) and node.id in self.assigned:
            return self.text_of(self.assigned[node.id], depth + 1)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mod):
            left, right = self.text_of(node.left, depth + 1), self.text_of(node.right, depth + 1)
            if left is None and right is None:
                return None
            return (left or "x") + (right or "x")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("format", "replace", "strip", "join")
        ):
            return self.text_of(node.func.value, depth + 1)
        return None

    def is_literal(self, node: ast.expr) -> bool:
        """A plain string literal, or a module constant assigned one."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return True
        if isinstance(node, ast.Name) and node.id in self.assigned:
            value = self.assigned[node.id]
            return isinstance(value, ast.Constant) and isinstance(value.value, str)
        return False

    def sql_named(self, node: ast.expr) -> bool:
        """A receiver whose text is unknown but whose name says it holds SQL (`sql.format(...)`)."""
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
        return bool(re.search(r"(?i)sql|query|where|predicate|clause", name))

    def violations(self) -> list[str]:
        found: list[str] = []

        def report(node: ast.AST, what: str) -> None:
            found.append(f"{self.path}:{getattr(node, 'lineno', 0)}: {what}")

        for node in ast.walk(self.tree):
            if isinstance(node, ast.JoinedStr):
                text = self.text_of(node)
                if text is not None and looks_like_sql(text):
                    report(node, f"f-string builds SQL: {text.strip()[:60]!r}")
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mod):
                parts = [self.text_of(node.left), self.text_of(node.right)]
                if any(p is not None and looks_like_sql(p) for p in parts):
                    op = "+" if isinstance(node.op, ast.Add) else "%"
                    report(node, f"SQL built with `{op}`")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                method, receiver = node.func.attr, node.func.value
                if method in ("format", "replace", "join", "format_map"):
                    text = self.text_of(receiver)
                    named = text is None and method != "join" and self.sql_named(receiver)
                    if (text is not None and looks_like_sql(text)) or named:
                        report(node, f"SQL built with `.{method}()`")
            if isinstance(node, ast.Call):
                name = (
                    node.func.id
                    if isinstance(node.func, ast.Name)
                    else node.func.attr
                    if isinstance(node.func, ast.Attribute)
                    else ""
                )
                if name in SQL_SINKS and node.args and not self.is_literal(node.args[0]):
                    report(node, f"`{name}()` of a computed string (use app.kernel.sql.compose)")
        return found


def _modules() -> list[Path]:
    return sorted(
        p.relative_to(ROOT) for root in SCANNED for p in (ROOT / root).rglob("*.py") if ".venv" not in p.parts
    )


def _violations(path: Path) -> list[str]:
    if path == HELPER:
        return []
    module = _Module(ROOT / path)
    module.path = path
    return module.violations()


def test_no_sql_is_built_by_string_formatting() -> None:
    found = [v for path in _modules() for v in _violations(path)]
    assert not found, "SQL built by string formatting (compose it with app.kernel.sql):\n" + "\n".join(found)


FORMATTED_SQL = [
    'sql = f"SELECT * FROM t WHERE {w}"',
    'sql = "SELECT * FROM t WHERE {w}".format(w=x)',
    'SQL = "SELECT 1 WHERE {guard}"\nsql = SQL.replace("{guard}", x)',
    'sql = "SELECT * FROM t WHERE id = %s" % x',
    'sql = "SELECT * FROM t WHERE " + where',
    'sql = " AND ".join(parts)',
    "from sqlalchemy import text\nstatement = text(built)",
    "statement = page_sql.format(before=x)",
    'index = f"repo_count_{w}d DESC"',
    'predicate = f"{keyset} < (:cursor_at, :cursor_id)"',
]
OTHER_STRINGS = [
    'message = "{limit} requests per minute".format(limit=3)',
    'key = f"{name}_{w}d"',
    'path = raw.replace("\\\\", "/")',
    'STATEMENT = "SELECT 1"\nfrom sqlalchemy import text\nstatement = text(STATEMENT)',
    "label = f\"{days} days, {status or 'all'}\"",
]


@pytest.mark.parametrize(
    ("source", "formatted"), [(text, True) for text in FORMATTED_SQL] + [(text, False) for text in OTHER_STRINGS]
)
def test_the_lint_catches_each_way_of_formatting_sql_and_leaves_other_strings_alone(
    source: str, formatted: bool, tmp_path: Path
) -> None:
    path = tmp_path / "module.py"
    path.write_text(source + "\n")
    assert bool(_Module(path).violations()) is formatted, source


# ---- the helper ------------------------------------------------------------------------------------------------


def test_compose_fills_named_typed_slots() -> None:
    t = table("infestation_patterns", column("pattern_key")).alias("p")
    composed = compose(
        "SELECT {columns} FROM infestation_patterns p WHERE repo_count_{w}d >= 2 AND {key} AND {status}_count > 0",
        columns=join(", ", [Fragment("p.pattern_key"), Fragment("p.title")]),
        w=Window(30),
        key=t.c.pattern_key == bindparam("key"),
        status=Name("open"),
    )
    assert composed.sql == (
        "SELECT p.pattern_key, p.title FROM infestation_patterns p WHERE repo_count_30d >= 2 "
        "AND p.pattern_key = :key AND open_count > 0"
    )


def test_compose_refuses_a_missing_or_a_leftover_slot() -> None:
    with pytest.raises(SlotError, match="no value for slot"):
        compose("SELECT 1 WHERE {guard}")
    with pytest.raises(SlotError, match="not in the template"):
        compose("SELECT 1", guard=Fragment("TRUE"))


def test_slots_are_typed() -> None:
    with pytest.raises(SlotError):
        Window(14)
    with pytest.raises(SlotError):
        Name("open; DROP TABLE scans")
    with pytest.raises(SlotError):
        compose("SELECT {x}", x="1; DROP TABLE scans")  # type: ignore[arg-type]
    with pytest.raises(SlotError):
        compose("SELECT {x}", x=7)  # type: ignore[arg-type]
    with pytest.raises(SlotError):
        Fragment("SELECT {x}")  # a fragment has no slots
    with pytest.raises(SlotError):
        outer("c.id; DROP TABLE scans")


def test_a_composed_condition_keeps_its_meaning() -> None:
    accounts = table("accounts", column("tier"), column("role")).alias("a")
    either = or_(accounts.c.tier == "reviewer", accounts.c.role == "admin")
    assert compose("a.state = 'active' AND {qualified}", qualified=either).sql == (
        "a.state = 'active' AND (a.tier = 'reviewer' OR a.role = 'admin')"
    )


def test_a_spliced_subquery_reaches_the_enclosing_statement_through_outer() -> None:
    patterns = table("infestation_patterns", column("pattern_key"))
    with pytest.raises(SlotError, match="outer"):  # it would read every pattern row in its own FROM
        compose("SELECT 1 FROM infestation_patterns p WHERE {v}", v=visible_pattern(patterns.c.pattern_key))
    spliced = compose("SELECT 1 FROM infestation_patterns p WHERE {v}", v=visible_pattern(outer("p.pattern_key")))
    assert "FROM infestation_pattern_instances AS gi \nWHERE gi.pattern_key = p.pattern_key" in spliced.sql


def test_core_values_are_inlined_and_bind_parameters_stay_named() -> None:
    scans = table("scans", column("id"), column("visibility")).alias("s")
    predicate = (scans.c.visibility == "public") & (scans.c.id == bindparam("scan_id")) & (scans.c.id > 2)
    assert sql.render(predicate).sql == "s.visibility = 'public' AND s.id = :scan_id AND s.id > 2"
    assert sql.render(Window(7).since).sql == "now() - interval '168 hours'"
    assert sql.names(("a", "b"), prefix="i").sql == "i.a, i.b"
    # typed columns: a parameter text() can read, no `::type` cast glued to it
    findings = table("scan_findings", column("public_id", Uuid)).alias("f")
    assert sql.render(findings.c.public_id == bindparam("id")).sql == "f.public_id = :id"
