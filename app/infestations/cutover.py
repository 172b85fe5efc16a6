"""The hard cutover gates (docs/domain.md §13 "Feature flag and Cutover gates"): `read_from_rollup` may be turned on only when every one of them holds."""

from __future__ import annotations

from sqlalchemy import text

from app.infestations.models import ROLLUP_READ_MODELS
from app.infestations.shadow import shadow_compare_all
from app.kernel import db
from app.kernel.sql import statement
from app.record.public import public_canonical

COVERAGE_THRESHOLD = 0.99
RECENT_REFRESH_HOURS = 26  # hourly window recompute and nightly reconcile both bump refreshed_at
DIRTY_MAX_AGE_SECONDS = 60
RECONCILE_MAX_AGE_HOURS = 26  # nightly, with slack for a slow run
# every index the rollup reads depend on, from the models themselves: an index added to a rollup table is checked
# without anyone remembering to list it here
ROLLUP_INDEXES = tuple(
    sorted(str(index.name) for model in ROLLUP_READ_MODELS for index in model.__table__.indexes)  # type: ignore[attr-defined]
)

Gate = tuple[str, bool, str]

# Source keys: the distinct keys of the public join set (docs/domain.md §3). Covered: those with a rollup row refreshed
# recently. A key the projection has not reached yet is the thing this gate exists to catch.
_COVERAGE = statement(
    """
WITH source AS (
  SELECT DISTINCT c.pattern_key
  FROM canonical_findings c
  JOIN repositories r ON r.id = c.repository_id
  WHERE {public} AND c.pattern_key IS NOT NULL AND c.pattern_key <> ''
)
SELECT COUNT(*) AS source_keys,
       COUNT(p.pattern_key) FILTER (WHERE p.refreshed_at >= now() - make_interval(hours => :hours)) AS covered
FROM source LEFT JOIN infestation_patterns p ON p.pattern_key = source.pattern_key
""",
    public=public_canonical(),
)

_INDEXES_SQL = """
SELECT c.relname, i.indisvalid AND i.indisready AS valid
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE c.relname = ANY(CAST(:names AS text[]))
"""

# Claimable (not throttled, not leased) and last dirtied over a minute ago: the workers are not keeping up.
_STALE_DIRTY_SQL = """
SELECT COUNT(*) AS stale, EXTRACT(EPOCH FROM now() - MIN(dirtied_at)) AS oldest
FROM infestation_dirty_keys
WHERE available_at <= now()
  AND (claimed_until IS NULL OR claimed_until < now())
  AND dirtied_at < now() - make_interval(secs => :seconds)
"""

_RECONCILE_SQL = """
SELECT finished_at, finished_at >= now() - make_interval(hours => :hours) AS recent
FROM job_runs WHERE name = 'reconcile'
"""


async def _coverage() -> Gate:
    async with db.read_session(replica=False) as session:
        row = (await session.execute(_COVERAGE, {"hours": RECENT_REFRESH_HOURS})).mappings().one()
    source, covered = int(row["source_keys"]), int(row["covered"])
    if source == 0:
        return ("backfill coverage", True, "no public pattern keys yet (empty registry)")
    ratio = covered / source
    detail = f"{covered}/{source} source keys refreshed within {RECENT_REFRESH_HOURS}h ({ratio:.2%}; need 99%)"
    return ("backfill coverage", ratio >= COVERAGE_THRESHOLD, detail)


async def _rollup_indexes() -> Gate:
    async with db.read_session(replica=False) as session:
        rows = (await session.execute(text(_INDEXES_SQL), {"names": list(ROLLUP_INDEXES)})).mappings().all()
    valid = {row["relname"]: bool(row["valid"]) for row in rows}
    missing = [name for name in ROLLUP_INDEXES if name not in valid]
    invalid = [name for name, ok in valid.items() if not ok]
    if missing or invalid:
        parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"invalid {', '.join(sorted(invalid))}"] if invalid else []
        )
        return ("rollup indexes valid", False, "; ".join(parts))
    return ("rollup indexes valid", True, f"{len(ROLLUP_INDEXES)} rollup indexes valid")


async def _dirty_backlog() -> Gate:
    async with db.read_session(replica=False) as session:
        row = (await session.execute(text(_STALE_DIRTY_SQL), {"seconds": DIRTY_MAX_AGE_SECONDS})).mappings().one()
    stale = int(row["stale"])
    if stale:
        oldest = float(row["oldest"])
        return ("dirty backlog drained", False, f"{stale} claimable dirty keys waiting, oldest {oldest:.0f}s")
    return ("dirty backlog drained", True, f"no claimable dirty key older than {DIRTY_MAX_AGE_SECONDS}s")


async def _recent_reconcile() -> Gate:
    async with db.read_session(replica=False) as session:
        row = (await session.execute(text(_RECONCILE_SQL), {"hours": RECONCILE_MAX_AGE_HOURS})).mappings().first()
    if row is None or row["finished_at"] is None:
        return ("recent reconcile", False, "no finished reconcile run recorded")
    ok = bool(row["recent"])
    detail = f"last reconcile finished {row['finished_at'].isoformat()}"
    return ("recent reconcile", ok, detail if ok else f"{detail} (older than {RECONCILE_MAX_AGE_HOURS}h)")


async def _shadow_clean() -> Gate:
    problems = await shadow_compare_all()
    if problems:
        more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
        return ("shadow-compare clean", False, f"{len(problems)} mismatches: " + "; ".join(problems[:3]) + more)
    return ("shadow-compare clean", True, "legacy and rollup agree on every window x status x min_repos")


_GATES = (_coverage, _rollup_indexes, _dirty_backlog, _recent_reconcile, _shadow_clean)


async def cutover_check() -> list[Gate]:
    """Each gate as `(name, passed, detail)`, in the documented order; cutover needs every one to pass."""
    return [await gate() for gate in _GATES]


async def first_failing_gate() -> Gate | None:
    """The first gate that fails, in the documented order (the costly shadow-compare runs last, only when every
    other gate passed); None when cutover may proceed (`tarakan flags set infestations.read_from_rollup true`)."""
    for gate in _GATES:
        result = await gate()
        if not result[1]:
            return result
    return None
