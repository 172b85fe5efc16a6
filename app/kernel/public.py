"""The public join set (docs/domain.md §3), written once as SQL fragments.

A finding is public when its repository is `listed` AND the report (scan) that carries it is `public`
(not `public_summary`, not `restricted`). Every read or write that decides what anonymous visitors, crawlers and
the infestation rollups may see splices these fragments instead of spelling the condition out again: the
projection and its maintenance, the legacy atlas reads, the cutover gate, the outbox (dirty-key discovery), the
change feed and the bulk export, search, the sitemap and the indexable findings.

Aliases are fixed by convention: `r` repositories, `s` scans, `f` scan_findings (occurrences), `c`
canonical_findings. Use the functions when a query needs another alias or none.
"""

from __future__ import annotations

LISTED = "listed"  # repositories.listing_status of a repository in the public join set
PUBLIC = "public"  # scans.visibility of a report in the public join set


def listed_repository(alias: str | None = "r") -> str:
    """`r.listing_status = 'listed'`: the repository half of the join set (`alias=None` for a bare table)."""
    column = f"{alias}.listing_status" if alias else "listing_status"
    return f"{column} = '{LISTED}'"


def public_scan(alias: str | None = "s") -> str:
    """`s.visibility = 'public'`: the report half of the join set."""
    column = f"{alias}.visibility" if alias else "visibility"
    return f"{column} = '{PUBLIC}'"


LISTED_REPOSITORY = listed_repository()
PUBLIC_SCAN = public_scan()

# An occurrence row joined to its scan `s` and repository `r` is in the join set (indexable findings, the legacy
# instance ledger, the change feed's diff, the export; the projection's sample probe splices the two halves).
PUBLIC_JOIN = f"{PUBLIC_SCAN} AND {LISTED_REPOSITORY}"

# The canonical `c` has at least one public occurrence, whatever its repository's listing. EXISTS rather than a
# join: a canonical with many public occurrences must count once. The outbox uses it alone (delist-safe key
# discovery must still find a delisted repository's keys).
HAS_PUBLIC_OCCURRENCE = (
    "EXISTS (SELECT 1 FROM scan_findings f JOIN scans s ON s.id = f.scan_id "
    f"WHERE f.canonical_finding_id = c.id AND {PUBLIC_SCAN})"
)

# The canonical `c`, joined to its repository `r`, is in the join set: the grain of the infestation rollups.
PUBLIC_CANONICAL = f"{LISTED_REPOSITORY} AND {HAS_PUBLIC_OCCURRENCE}"


# ---- the read-time guard (docs/domain.md §5.7 "Read-time guard") ------------------------------------------------
# Rollup rows are derived and follow the source only after a worker drains their key; a takedown (a report made
# restricted or summary-only, a repository quarantined, pending or hard-deleted) must hold at the very next request
# without a worker. So every public read of a derived row re-checks, by primary key, that the report its sample
# came from is still in the join set. The aliases `gs`/`gr`/`gf`/`gi` are reserved for the guard.


def visible_scan(scan_id: str) -> str:
    """The report `scan_id` (an SQL expression) is `public` on a `listed` repository, now: two primary-key probes.
    A hard-deleted report (or an expression that is NULL) is not visible."""
    return (
        "EXISTS (SELECT 1 FROM scans gs JOIN repositories gr ON gr.id = gs.repository_id "
        f"WHERE gs.id = {scan_id} AND {public_scan('gs')} AND {listed_repository('gr')})"
    )


def visible_occurrence(public_id: str) -> str:
    """The occurrence with public id `public_id` (an SQL expression) still exists in a visible report: the unique
    `scan_findings.public_id` index, then `visible_scan`. Guards the samples of pattern and membership rows."""
    return visible_scan(f"(SELECT gf.scan_id FROM scan_findings gf WHERE gf.public_id = {public_id})")


def visible_pattern(pattern_key: str) -> str:
    """The pattern `pattern_key` still has at least one visible instance row: a pattern whose every row was taken
    down is not shown (its show page 404s) even before its refresh. Stops at the first visible instance. `OFFSET 0`
    keeps it a per-row probe: the planner may not turn it into a join over every instance, so the ranked list still
    walks its rank index and stops after `limit` rows."""
    return (
        "EXISTS (SELECT 1 FROM infestation_pattern_instances gi "
        f"WHERE gi.pattern_key = {pattern_key} AND {visible_scan('gi.sample_scan_id')} OFFSET 0)"
    )


def shown_pattern(pattern_key: str, sample_visible: str) -> str:
    """The pattern `pattern_key` is shown: its own sample is visible (`sample_visible`: the caller's column holding
    `visible_occurrence` of the pattern row's sample, computed once per row), or else one of its instance rows is.
    A visible sample is a visible instance (the one it was taken from), so the walk of `visible_pattern` runs only
    for a pattern whose sample was taken down: half of the guard's cost on a ranked list (docs/benchmarks.md)."""
    return f"({sample_visible} OR {visible_pattern(pattern_key)})"
