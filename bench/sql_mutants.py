"""SQL-text mutants of the SQL guards (issue 29): the public join set and read-time guard of app/record/public.py
and the quorum's reviewer condition of app/kernel/actors.py are Core conditions that the feature modules compile
into their statements at import, where a Python mutation tool's switch (flipped at test time) never reaches them.

Each mutant here replaces one guard function by a broken twin (a flipped comparison, one predicate dropped, AND and
OR swapped). As a pytest plugin (`-p bench.sql_mutants`, TARAKAN_SQL_MUTANT=NAME) it swaps the function in before
any feature module is imported, so every statement built from it carries the mutant; bench/mutation.py runs the
covering tests of the consumers once per mutant, and each mutant must fail them."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, FromClause, and_, or_, select

from app.kernel import actors
from app.kernel.sql import ONE, outer
from app.record import public

# the consumers' tests that meet each guard through real pages: every public surface at the next request after each
# kind of takedown, then the atlas counts after a drain (in-process, no worker); the quorum's tally and reasons
_TAKEDOWNS = (
    "tests/system/test_takedowns.py::test_a_takedown_holds_at_the_next_request_on_every_surface_then_counts_follow"
    "_the_drain",
)
_QUORUM = ("tests/reports/test_quorum.py", "tests/reports/test_quorum_mutants.py")
# the legacy atlas path (the flag off) reads canonicals through public_canonical / has_public_occurrence directly
_LEGACY = ("tests/infestations/test_legacy.py::test_counts_distinct_canonicals_over_the_public_join_only",)
_RANK_PLAN = ("tests/infestations/test_infestation_queries.py::test_ranked_list_walks_the_rank_index_of_its_window",)
# a report or an occurrence a gate holds back, on every public surface before and after its publication
_PUBLICATION = ("tests/evidence/test_publication.py",)


@dataclass(frozen=True)
class SqlMutant:
    name: str
    module: Any  # the module whose function is replaced
    function: str
    twin: Callable[..., ColumnElement[bool]]
    tests: tuple[str, ...]


def _public_scan_flipped(s: FromClause = public.scan_alias) -> ColumnElement[bool]:
    return s.c.visibility != public.PUBLIC


def _published_scan_always(s: FromClause = public.scan_alias) -> ColumnElement[bool]:
    return s.c.id.is_not(None)


def _published_occurrence_always(f: FromClause = public.finding_alias) -> ColumnElement[bool]:
    return f.c.id.is_not(None)


def _listed_repository_flipped(r: FromClause = public.repository_alias) -> ColumnElement[bool]:
    return r.c.listing_status != public.LISTED


def _public_join_or(s: FromClause = public.scan_alias, r: FromClause = public.repository_alias) -> ColumnElement[bool]:
    return or_(public.public_scan(s), public.listed_repository(r))


def _visible_scan(*, scan: bool = True, listed: bool = True, keyed: bool = True) -> Callable[..., ColumnElement[bool]]:
    def visible_scan(scan_id: ColumnElement[Any]) -> ColumnElement[bool]:
        gs, gr = public.scans.alias("gs"), public.repositories.alias("gr")
        conditions = [gs.c.id == scan_id] if keyed else []
        conditions += [public.public_scan(gs)] if scan else []
        conditions += [public.listed_repository(gr)] if listed else []
        return (
            select(ONE)
            .select_from(gs.join(gr, gr.c.id == gs.c.repository_id))
            .where(*conditions)
            .correlate_except(gs, gr)
            .exists()
        )

    return visible_scan


def _has_public_occurrence_any_scan(canonical_id: ColumnElement[Any] | None = None) -> ColumnElement[bool]:
    f, s = public.scan_findings.alias("f"), public.scans.alias("s")
    return (
        select(ONE)
        .select_from(f.join(s, s.c.id == f.c.scan_id))
        .where(f.c.canonical_finding_id == (outer("c.id") if canonical_id is None else canonical_id))
        .correlate_except(f, s)
        .exists()
    )


def _public_canonical_or(
    r: FromClause = public.repository_alias, canonical_id: ColumnElement[Any] | None = None
) -> ColumnElement[bool]:
    return or_(public.listed_repository(r), public.has_public_occurrence(canonical_id))


def _visible_occurrence_flipped(public_id: ColumnElement[Any]) -> ColumnElement[bool]:
    gf = public.scan_findings.alias("gf")
    occurrence = select(gf.c.scan_id).where(gf.c.public_id != public_id).correlate_except(gf).limit(1)
    return public.visible_scan(occurrence.scalar_subquery())


def _visible_pattern_any_instance(pattern_key: ColumnElement[Any]) -> ColumnElement[bool]:
    gi = public.pattern_instances.alias("gi")
    return select(ONE).where(gi.c.pattern_key == pattern_key).correlate_except(gi).offset(0).exists()


def _visible_pattern_no_fence(pattern_key: ColumnElement[Any]) -> ColumnElement[bool]:
    gi = public.pattern_instances.alias("gi")
    return select(ONE).where(gi.c.pattern_key == pattern_key, public.visible_scan(gi.c.sample_scan_id)).exists()


def _shown_pattern_and(pattern_key: ColumnElement[Any], sample_visible: ColumnElement[bool]) -> ColumnElement[bool]:
    return and_(sample_visible, public.visible_pattern(pattern_key))


def _qualified_reviewer_and(accounts: FromClause) -> ColumnElement[bool]:
    return and_(accounts.c.trust_tier == actors.REVIEWER_TIER, accounts.c.platform_role.in_(actors.MODERATOR_ROLES))


def _qualified_reviewer_flipped(accounts: FromClause) -> ColumnElement[bool]:
    return or_(accounts.c.trust_tier != actors.REVIEWER_TIER, accounts.c.platform_role.in_(actors.MODERATOR_ROLES))


MUTANTS = (
    SqlMutant("public_scan: = becomes <>", public, "public_scan", _public_scan_flipped, _TAKEDOWNS),
    SqlMutant("published_scan: always true", public, "published_scan", _published_scan_always, _PUBLICATION),
    SqlMutant(
        "published_occurrence: always true", public, "published_occurrence", _published_occurrence_always, _PUBLICATION
    ),
    SqlMutant("listed_repository: = becomes <>", public, "listed_repository", _listed_repository_flipped, _TAKEDOWNS),
    SqlMutant("public_join: AND becomes OR", public, "public_join", _public_join_or, _TAKEDOWNS),
    SqlMutant("visible_scan: no listing predicate", public, "visible_scan", _visible_scan(listed=False), _TAKEDOWNS),
    SqlMutant("visible_scan: no visibility predicate", public, "visible_scan", _visible_scan(scan=False), _TAKEDOWNS),
    SqlMutant("visible_scan: no key predicate", public, "visible_scan", _visible_scan(keyed=False), _TAKEDOWNS),
    SqlMutant(
        "has_public_occurrence: no visibility predicate",
        public,
        "has_public_occurrence",
        _has_public_occurrence_any_scan,
        _LEGACY,
    ),
    SqlMutant("public_canonical: AND becomes OR", public, "public_canonical", _public_canonical_or, _LEGACY),
    SqlMutant(
        "visible_occurrence: = becomes <>", public, "visible_occurrence", _visible_occurrence_flipped, _TAKEDOWNS
    ),
    SqlMutant("visible_pattern: no sample guard", public, "visible_pattern", _visible_pattern_any_instance, _TAKEDOWNS),
    SqlMutant("visible_pattern: no OFFSET 0 fence", public, "visible_pattern", _visible_pattern_no_fence, _RANK_PLAN),
    SqlMutant("shown_pattern: OR becomes AND", public, "shown_pattern", _shown_pattern_and, _TAKEDOWNS),
    SqlMutant("qualified_reviewer: OR becomes AND", actors, "qualified_reviewer", _qualified_reviewer_and, _QUORUM),
    SqlMutant("qualified_reviewer: = becomes <>", actors, "qualified_reviewer", _qualified_reviewer_flipped, _QUORUM),
)


def _apply(name: str) -> None:
    (mutant,) = [m for m in MUTANTS if m.name == name]
    setattr(mutant.module, mutant.function, mutant.twin)


if os.environ.get("TARAKAN_SQL_MUTANT"):
    # at plugin import: before tests/conftest.py, so before any feature module compiles its statements
    _apply(os.environ["TARAKAN_SQL_MUTANT"])
