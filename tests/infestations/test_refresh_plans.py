"""A refresh's cost stays linear in its key's instances whatever the planner statistics say: a key that grew since
the instance table was last analyzed (a bulk import, a long test suite's leftover statistics) was synced with a
nested loop over the source rows, 12,000 instances taking 26 s instead of 0.3 s (docs/domain.md §5.2). The drain's
set-based statements over a batch of keys hold to it too, and read a hot key's instances at most once however many
of its repositories the batch's scope names (§5.5 "Refresh")."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import text

from app.infestations import projection
from app.infestations.keys import Keys
from app.infestations.projection_sql import (
    delete_stale_memberships,
    sync_instances,
    sync_status_windows,
    upsert_memberships,
)
from app.kernel import db
from app.reports.finding_memory import pattern_key
from tests import factories
from tests.conftest import truncate_all
from tests.sql import execute, rows
from tests.system.support import BIG_KEY, BIG_PER_REPOSITORY, BIG_REPOSITORIES, build_big_pattern


def nested_loops_over_a_cte(plan: dict[str, Any]) -> list[str]:
    """Every nested loop of the plan that rescans a CTE for each outer row."""
    found = []
    children = plan.get("Plans", [])
    if plan["Node Type"] == "Nested Loop" and any(child["Node Type"] == "CTE Scan" for child in children[1:]):
        found.append(f"{plan.get('Join Type', '')} nested loop over CTE {children[1].get('CTE Name')}")
    for child in children:
        found.extend(nested_loops_over_a_cte(child))
    return found


def most_rows_read(plan: dict[str, Any], table: str) -> float:
    """The most rows one node of an analyzed plan read from `table`, over all its loops (kept and filtered out)."""
    read = 0.0
    if plan.get("Relation Name") == table:
        kept = (
            plan["Actual Rows"] + plan.get("Rows Removed by Filter", 0) + plan.get("Rows Removed by Index Recheck", 0)
        )
        read = plan["Actual Loops"] * kept
    return max([read, *(most_rows_read(child, table) for child in plan.get("Plans", []))])


async def explained(statement: Any, keys: Keys, *, analyze: bool = False) -> dict[str, Any]:
    """The statement's plan (run, then rolled back, when `analyze`)."""
    options = "ANALYZE, FORMAT JSON" if analyze else "FORMAT JSON"
    async with db.transaction() as session:
        raw = (await session.execute(text(f"EXPLAIN ({options}) " + statement.text), keys.params)).scalar_one()
        await session.rollback()
    plan: dict[str, Any] = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    return plan


async def test_the_instance_sync_never_rescans_its_source_per_row_with_stale_statistics() -> None:
    reporter = await factories.create_account()
    await build_big_pattern(reporter.id)
    await projection.refresh_pattern(BIG_KEY)
    # statistics saying every key has one instance, as a table of many small patterns leaves them; kept by TRUNCATE
    await execute("UPDATE infestation_pattern_instances SET pattern_key = md5(canonical_finding_id::text)")
    await execute("ANALYZE infestation_pattern_instances")
    truncate_all()
    reporter = await factories.create_account()
    await build_big_pattern(reporter.id)
    await projection.refresh_pattern(BIG_KEY)  # 12,000 instances the statistics do not know about

    await execute(  # a third of them fixed: the refresh has rows to update, as the worker's did when it crawled
        "UPDATE canonical_findings SET status = 'fixed', updated_at = now() WHERE pattern_key = :k AND id % 3 = 0",
        k=BIG_KEY,
    )
    assert nested_loops_over_a_cte(await explained(sync_instances("key"), Keys(key=BIG_KEY))) == []

    # a drain's batch holding the key whole, then scoped to four of its repositories, beside a key of one row
    small = await factories.create_repository()
    await factories.create_instance(small, reporter, "A small pattern")
    repositories = [r["id"] for r in await rows("SELECT id FROM repositories WHERE owner = 'big' ORDER BY id LIMIT 4")]
    whole = Keys(keys=(BIG_KEY, pattern_key("A small pattern")))
    scoped = Keys(pairs=((pattern_key("A small pattern"), small.id), *((BIG_KEY, r) for r in repositories)))
    for statement in (sync_instances("keys"), sync_status_windows("keys")):
        assert nested_loops_over_a_cte(await explained(statement, whole)) == [], statement.text
    for statement in (sync_instances("pairs"), upsert_memberships("pairs"), delete_stale_memberships("pairs")):
        plan = await explained(statement, scoped, analyze=True)
        assert nested_loops_over_a_cte(plan) == [], statement.text
        # a probe by key per (key, repository) pair walked the key's 12,000 instances once per pair
        assert most_rows_read(plan, "infestation_pattern_instances") <= BIG_REPOSITORIES * BIG_PER_REPOSITORY
