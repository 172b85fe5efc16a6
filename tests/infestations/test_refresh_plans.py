"""A refresh's cost stays linear in its key's instances whatever the planner statistics say: a key that grew since
the instance table was last analyzed (a bulk import, a long test suite's leftover statistics) was synced with a
nested loop over the source rows, 12,000 instances taking 26 s instead of 0.3 s (docs/domain.md §5.2)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import text

from app.infestations import projection
from app.infestations.projection_sql import Keys, sync_instances
from app.kernel import db
from tests import factories
from tests.conftest import truncate_all
from tests.sql import execute
from tests.system.support import BIG_KEY, build_big_pattern


def nested_loops_over_a_cte(plan: dict[str, Any]) -> list[str]:
    """Every nested loop of the plan that rescans a CTE for each outer row."""
    found = []
    children = plan.get("Plans", [])
    if plan["Node Type"] == "Nested Loop" and any(child["Node Type"] == "CTE Scan" for child in children[1:]):
        found.append(f"{plan.get('Join Type', '')} nested loop over CTE {children[1].get('CTE Name')}")
    for child in children:
        found.extend(nested_loops_over_a_cte(child))
    return found


async def test_the_instance_sync_never_rescans_its_source_per_row_with_stale_statistics() -> None:
    reporter = await factories.create_account()
    await build_big_pattern(reporter.id)
    await projection.refresh_pattern(BIG_KEY)
    # statistics saying every key has one instance, as a table of many small patterns leaves them; kept by TRUNCATE
    await execute("UPDATE infestation_pattern_instances SET pattern_key = md5(canonical_finding_id::text)")
    await execute("ANALYZE infestation_pattern_instances")
    truncate_all()
    await build_big_pattern((await factories.create_account()).id)
    await projection.refresh_pattern(BIG_KEY)  # 12,000 instances the statistics do not know about

    await execute(  # a third of them fixed: the refresh has rows to update, as the worker's did when it crawled
        "UPDATE canonical_findings SET status = 'fixed', updated_at = now() WHERE pattern_key = :k AND id % 3 = 0",
        k=BIG_KEY,
    )
    keys = Keys(key=BIG_KEY)
    async with db.read_session(replica=False) as session:
        explained = await session.execute(text("EXPLAIN (FORMAT JSON) " + sync_instances(keys.shape).text), keys.params)
        raw = explained.scalar_one()
    plan = json.loads(raw) if isinstance(raw, str) else raw
    assert nested_loops_over_a_cte(plan[0]["Plan"]) == []
