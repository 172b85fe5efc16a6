"""The public join set (docs/domain.md §3), written once as SQL fragments.

A finding is public when its repository is `listed` AND the report (scan) that carries it is `public`
(not `public_summary`, not `restricted`). Every read or write that decides what anonymous visitors, crawlers and
the infestation rollups may see splices these fragments instead of spelling the condition out again: the
projection and its maintenance, the legacy atlas reads, the cutover gate, the outbox (dirty-key discovery),
search, the sitemap and the indexable findings.

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

# An occurrence row joined to its scan `s` and repository `r` is in the join set (indexable findings, the
# projection's per-canonical sample, the legacy instance ledger).
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
