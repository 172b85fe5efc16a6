"""The one way to fill SQL text: templates with named, typed slots (docs/architecture.md "Composing SQL").

Dynamic predicates are SQLAlchemy Core expressions; a large fixed statement stays SQL text whose `{name}` slots
`compose()` fills from `Fragment`s (code constants), `Window`s, `Name`s and Core expressions, refusing a missing or
a leftover slot. No other module formats SQL (tests/kernel/test_sql_composition.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, Final, LiteralString

from sqlalchemy import ClauseElement, ColumnElement, Interval, Select, TextClause, func, literal_column, text
from sqlalchemy.dialects.postgresql.base import PGCompiler, PGDialect
from sqlalchemy.engine.interfaces import BindTyping
from sqlalchemy.sql.elements import BindParameter, BooleanClauseList, ColumnClause, Grouping, Label
from sqlalchemy.sql.util import surface_selectables

WINDOW_DAYS: Final = (7, 30, 90, 365)  # the precomputed windows of the atlas (docs/domain.md §5.3)

_SLOT = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_NAME = re.compile(r"[a-z_][a-z0-9_]*")
_COLUMN_REF = re.compile(r"[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*")


ONE: Final[ColumnClause[Any]] = literal_column("1")  # the select list of an EXISTS probe


class SlotError(ValueError):
    """A template and its slots disagree, or a value is not a slot type: a programming error, raised at import."""


class Fragment:
    """Trusted SQL text: a string literal in the code, or the result of `compose()`/`join()`."""

    __slots__ = ("sql",)

    def __init__(self, sql: LiteralString) -> None:
        if _SLOT.search(sql):
            raise SlotError(f"a fragment has no slots; fill {sql!r} with compose()")
        self.sql: str = sql

    def __repr__(self) -> str:
        return f"Fragment({self.sql!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Fragment) and other.sql == self.sql

    def __hash__(self) -> int:
        return hash(self.sql)

    def statement(self) -> TextClause:
        """The fragment as an executable statement (its `:name` parameters bound at run time)."""
        return text(self.sql)


def _trusted(sql: str) -> Fragment:
    fragment = Fragment.__new__(Fragment)
    fragment.sql = sql
    return fragment


class Window(int):
    """A precomputed window in days: only 7, 30, 90 or 365."""

    def __new__(cls, days: int) -> Window:
        if days not in WINDOW_DAYS:
            raise SlotError(f"no precomputed window of {days} days")
        return super().__new__(cls, days)

    @property
    def length(self) -> ColumnElement[timedelta]:
        """`interval 'H hours'`, H = W x 24: exactly W days (not 'W days', which follows DST in a non-UTC session
        time zone)."""
        return literal_column(f"interval '{int(self) * 24} hours'", Interval)

    @property
    def since(self) -> ColumnElement[datetime]:
        """`now() - interval 'H hours'`: the window's start, as the legacy read's `now - days`."""
        return func.now() - self.length


class Name(str):
    """A lowercase SQL identifier (a column or alias named by a code constant, e.g. a status in `open_count`)."""

    def __new__(cls, value: str) -> Name:
        if not _NAME.fullmatch(value):
            raise SlotError(f"{value!r} is not a lowercase SQL identifier")
        return super().__new__(cls, value)


Slot = Fragment | Window | Name | ClauseElement


class _Compiler(PGCompiler):
    """Values known when the statement is built are inlined as literals (the plan sees constants, as a partial
    index predicate needs); a `bindparam` without a value stays a `:name` parameter bound at run time."""

    def visit_bindparam(self, bindparam: BindParameter[Any], *args: Any, **kw: Any) -> Any:
        kw["literal_binds"] = not (bindparam.value is None and bindparam.callable is None)
        return super().visit_bindparam(bindparam, *args, **kw)  # type: ignore[no-untyped-call]

    def limit_clause(self, select: Any, **kw: Any) -> str:
        # a bare `OFFSET 0` (the planner fence the guards rely on), without PostgreSQL's redundant `LIMIT ALL`
        if select._limit_clause is None and select._offset_clause is not None:
            return " OFFSET " + str(self.process(select._offset_clause, **kw))
        return str(super().limit_clause(select, **kw))  # type: ignore[no-untyped-call]


class _Dialect(PGDialect):
    statement_compiler = _Compiler
    bind_typing = BindTyping.NONE  # `:name` as text() reads it, without a `::type` cast


_DIALECT = _Dialect(paramstyle="named")  # type: ignore[no-untyped-call]


def _compile(element: ClauseElement, **kw: Any) -> str:
    return str(element.compile(dialect=_DIALECT, compile_kwargs=kw))


def render(element: ClauseElement) -> Fragment:
    """A Core expression or statement as PostgreSQL text, once (at import): literals inline, `:name` parameters."""
    if isinstance(element, ColumnElement):
        _refuse_uncorrelated(element)
    return _trusted(_compile(element, within_columns_clause=isinstance(element, Label)))


def _refuse_uncorrelated(node: ClauseElement, enclosing: frozenset[Any] = frozenset()) -> None:
    """Spliced alone, a subquery lists every table it reads in its own FROM: one that names its own tables
    (`correlate_except`) but reads a table no enclosing select of the expression has must reach the enclosing
    statement through `outer()`."""
    if isinstance(node, Select):
        froms = [set(surface_selectables(f)) for f in node.get_final_froms()]  # type: ignore[no-untyped-call]
        if node._correlate_except:
            own = set(node._correlate_except) | enclosing
            if any(not tables & own for tables in froms):
                raise SlotError("a spliced subquery reads the enclosing statement's table: use outer() for its column")
        enclosing = enclosing.union(*froms)
    for child in node.get_children():
        _refuse_uncorrelated(child, enclosing)


def compiled(statement: ClauseElement) -> TextClause:
    """A Core statement compiled once into the text that runs (what the plan tests EXPLAIN), so a request pays no
    compilation and no cache-key walk."""
    return text(render(statement).sql)


def outer(reference: LiteralString) -> ColumnClause[Any]:
    """`alias.column` of the enclosing SQL text, for a Core expression spliced into it (not added to a FROM)."""
    if not _COLUMN_REF.fullmatch(reference):
        raise SlotError(f"{reference!r} is not alias.column")
    return literal_column(reference)


def _fill(name: str, value: object) -> str:
    if isinstance(value, Fragment):
        return value.sql
    if isinstance(value, Window | Name):
        return str(int(value)) if isinstance(value, Window) else str(value)
    if isinstance(value, BooleanClauseList):  # `a OR b` inside `x AND {slot}` keeps its meaning
        return render(Grouping(value)).sql
    if isinstance(value, ClauseElement):
        return render(value).sql
    raise SlotError(f"slot {{{name}}}: {type(value).__name__} is not a Fragment, Window, Name or Core expression")


def compose(template: LiteralString, /, **slots: Slot) -> Fragment:
    """`template` with every `{name}` replaced by its slot; a slot missing from `slots`, or one of `slots` the
    template does not use, raises SlotError."""
    wanted = set(_SLOT.findall(template))
    if missing := wanted - slots.keys():
        raise SlotError(f"no value for slot(s) {', '.join(sorted(missing))}")
    if leftover := slots.keys() - wanted:
        raise SlotError(f"slot(s) {', '.join(sorted(leftover))} not in the template")
    filled = {name: _fill(name, value) for name, value in slots.items()}
    return _trusted(_SLOT.sub(lambda m: filled[m.group(1)], template))


def statement(template: LiteralString, /, **slots: Slot) -> TextClause:
    """`compose()` as an executable statement."""
    return compose(template, **slots).statement()


def names(names: Iterable[str], *, prefix: str | None = None) -> Fragment:
    """Identifiers as a list, `a, b` or `x.a, x.b` (column lists written once as tuples of names)."""
    qualifier = f"{Name(prefix)}." if prefix else ""
    return _trusted(", ".join(qualifier + Name(name) for name in names))


def join(separator: LiteralString, parts: Iterable[Slot]) -> Fragment:
    """Slots joined by `separator` (a select list, a chain of `AND`s)."""
    rendered = [_fill(str(n), part) for n, part in enumerate(parts)]
    if not rendered:
        raise SlotError("nothing to join")
    return _trusted(separator.join(rendered))
