"""Which rows a projection statement reads and writes (`Keys`: one key, its rows in some repositories, several keys,
several keys' rows in some repositories each, or a key range), as a predicate on any rollup table's alias."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import ARRAY, BigInteger, ColumnElement, Text, and_, any_, bindparam, cast, column
from sqlalchemy import table as _table

from app.kernel.sql import Fragment, Name, compose


@dataclass(frozen=True)
class Keys:
    """The rows a statement projects: one `key` (only its rows in `repositories` when given), several `keys` (a
    drain's batch), the (key, repository) `pairs` of several scoped keys, or every key in `[lo, hi)` (`hi` None: no
    upper bound)."""

    key: str | None = None
    lo: str = ""
    hi: str | None = None
    repositories: tuple[int, ...] | None = None
    keys: tuple[str, ...] = ()
    pairs: tuple[tuple[str, int], ...] = ()

    @property
    def shape(self) -> str:
        if self.key is not None:
            return "key" if self.repositories is None else "key_repositories"
        if self.keys:
            return "keys"
        if self.pairs:
            return "pairs"
        return "range" if self.hi is not None else "open_range"

    @property
    def params(self) -> dict[str, object]:
        if self.key is not None:
            if self.repositories is None:
                return {"key": self.key}
            return {"key": self.key, "repositories": list(self.repositories)}
        if self.keys:
            return {"keys": list(self.keys)}
        if self.pairs:
            return {"pair_keys": [k for k, _ in self.pairs], "pair_repositories": [r for _, r in self.pairs]}
        return {"lo": self.lo} if self.hi is None else {"lo": self.lo, "hi": self.hi}


_KEYED = _table("keyed", column("pattern_key"), column("repository_id"))  # any rollup table, by its alias


# Scoped keys' (key, repository) pairs: rows are found by their keys and repositories, as one scoped key's are
# (`key_repositories`), and the exact pairs are a filter. A semi-join on the pairs is planned as an index probe per
# pair, and no instance index leads with both columns: a probe by key walked all of a hot key's instances, once per
# pair of it (docs/domain.md §5.5 "Refresh").
_PAIRS = """({a}.pattern_key = ANY(CAST(:pair_keys AS text[]))
  AND {a}.repository_id = ANY(CAST(:pair_repositories AS bigint[]))
  AND ({a}.pattern_key, {a}.repository_id) = ANY(ARRAY(
    SELECT ROW(k, r) FROM unnest(CAST(:pair_keys AS text[]), CAST(:pair_repositories AS bigint[])) AS s(k, r))))"""


def rows_of_keys(shape: str, alias: str) -> ColumnElement[bool] | Fragment:
    """The rows of `Keys` of this shape in the table aliased `alias`."""
    rows = _KEYED.alias(alias)
    if shape == "key":
        return rows.c.pattern_key == bindparam("key")
    if shape == "key_repositories":
        repositories = any_(cast(bindparam("repositories"), ARRAY(BigInteger)))
        return and_(rows.c.pattern_key == bindparam("key"), rows.c.repository_id == repositories)
    if shape == "keys":
        return rows.c.pattern_key == any_(cast(bindparam("keys"), ARRAY(Text)))
    if shape == "pairs":
        return compose(_PAIRS, a=Name(alias))
    lo = rows.c.pattern_key >= bindparam("lo")
    return and_(lo, rows.c.pattern_key < bindparam("hi")) if shape == "range" else lo
