"""The public join set (docs/domain.md §3) and the read-time guard (§5.7) as Core expressions. Aliases: `r`
repositories, `s` scans, `f` scan_findings, `c` canonical_findings; `gs`/`gr`/`gf`/`gi` are the guard's."""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, ColumnElement, DateTime, FromClause, Text, Uuid, and_, column, or_, select
from sqlalchemy import table as _table

from app.kernel.sql import ONE, outer

LISTED = "listed"  # repositories.listing_status of a repository in the public join set
PUBLIC = "public"  # scans.visibility of a report in the public join set

# The columns the join set and the guard read (the models live in features the kernel does not import).
repositories = _table("repositories", column("id", BigInteger), column("listing_status", Text))
scans = _table(
    "scans",
    column("id", BigInteger),
    column("repository_id", BigInteger),
    column("visibility", Text),
    column("published_at", DateTime),
)
scan_findings = _table(
    "scan_findings",
    column("id", BigInteger),
    column("scan_id", BigInteger),
    column("canonical_finding_id", BigInteger),
    column("public_id", Uuid),
    column("published_at", DateTime),
)
pattern_instances = _table(
    "infestation_pattern_instances", column("pattern_key", Text), column("sample_scan_id", BigInteger)
)
repository_alias, scan_alias, finding_alias = repositories.alias("r"), scans.alias("s"), scan_findings.alias("f")


def listed_repository(r: FromClause = repository_alias) -> ColumnElement[bool]:
    """`r.listing_status = 'listed'`: the repository half of the join set."""
    return r.c.listing_status == LISTED


def published_scan(s: FromClause = scan_alias) -> ColumnElement[bool]:
    """`s.published_at IS NOT NULL`: the report is not held back (its evidence decided), stored state."""
    return s.c.published_at.is_not(None)


def public_scan(s: FromClause = scan_alias) -> ColumnElement[bool]:
    """`s.visibility = 'public' AND s.published_at IS NOT NULL`: the report half of the join set."""
    return and_(s.c.visibility == PUBLIC, published_scan(s))


def published_occurrence(f: FromClause = finding_alias) -> ColumnElement[bool]:
    """`f.published_at IS NOT NULL`: the occurrence half of `publishable` (no gate holds it back: its evidence is
    confirmed or unchecked). Every occurrence-level public read adds it to the join set."""
    return f.c.published_at.is_not(None)


def public_join(s: FromClause = scan_alias, r: FromClause = repository_alias) -> ColumnElement[bool]:
    """A report `s` of repository `r` is in the join set (occurrence-level reads add `published_occurrence`)."""
    return and_(public_scan(s), listed_repository(r))


def public_occurrence(
    f: FromClause = finding_alias, s: FromClause = scan_alias, r: FromClause = repository_alias
) -> ColumnElement[bool]:
    """An occurrence `f` joined to its scan `s` and repository `r` is publishable: the join set plus its own
    published state."""
    return and_(published_occurrence(f), public_join(s, r))


def has_public_occurrence(canonical_id: ColumnElement[Any] | None = None) -> ColumnElement[bool]:
    """The canonical (`c.id` of the enclosing statement by default) has a public occurrence, whatever its
    repository's listing (the outbox's delist-safe key discovery). EXISTS: many occurrences count once."""
    f, s = scan_findings.alias("f"), scans.alias("s")
    return (
        select(ONE)
        .select_from(f.join(s, s.c.id == f.c.scan_id))
        .where(
            f.c.canonical_finding_id == (outer("c.id") if canonical_id is None else canonical_id),
            published_occurrence(f),
            public_scan(s),
        )
        .correlate_except(f, s)
        .exists()
    )


def public_canonical(
    r: FromClause = repository_alias, canonical_id: ColumnElement[Any] | None = None
) -> ColumnElement[bool]:
    """The canonical, joined to its repository `r`, is in the join set: the grain of the infestation rollups."""
    return and_(listed_repository(r), has_public_occurrence(canonical_id))


# ---- the read-time guard (docs/domain.md §5.7 "Read-time guard") ------------------------------------------------
# every public read of a derived row re-checks its sample by primary key: a takedown holds before the drain


def visible_scan(scan_id: ColumnElement[Any]) -> ColumnElement[bool]:
    """The report `scan_id` is `public` and published on a `listed` repository, now: two primary-key probes. A hard-deleted
    report (or a NULL id) is not visible."""
    gs, gr = scans.alias("gs"), repositories.alias("gr")
    return (
        select(ONE)
        .select_from(gs.join(gr, gr.c.id == gs.c.repository_id))
        .where(gs.c.id == scan_id, public_scan(gs), listed_repository(gr))
        .correlate_except(gs, gr)
        .exists()
    )


def visible_occurrence(public_id: ColumnElement[Any]) -> ColumnElement[bool]:
    """The occurrence `public_id` still exists, published, in a visible report (the unique `scan_findings.public_id`
    index, then `visible_scan`). Guards the samples of pattern and membership rows."""
    gf = scan_findings.alias("gf")
    scan_id = select(gf.c.scan_id).where(gf.c.public_id == public_id, published_occurrence(gf))
    return visible_scan(scan_id.correlate_except(gf).scalar_subquery())


def visible_pattern(pattern_key: ColumnElement[Any]) -> ColumnElement[bool]:
    """The pattern still has a visible instance row (else its show page 404s before its refresh). `OFFSET 0`
    keeps it a per-row probe, so a ranked list still walks its rank index and stops after `limit` rows."""
    gi = pattern_instances.alias("gi")
    return (
        select(ONE)
        .where(gi.c.pattern_key == pattern_key, visible_scan(gi.c.sample_scan_id))
        .correlate_except(gi)
        .offset(0)
        .exists()
    )


def shown_pattern(pattern_key: ColumnElement[Any], sample_visible: ColumnElement[bool]) -> ColumnElement[bool]:
    """The pattern is shown: its own sample is visible (`sample_visible`, computed once per row), or else one of
    its instance rows is; the instance walk then runs only for a pattern whose sample was taken down."""
    return or_(sample_visible, visible_pattern(pattern_key))
