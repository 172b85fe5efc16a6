"""The set-based backfill and window recompute (key ranges, a few statements each) leave exactly the rollups that
per-key refreshes leave, on random data: from empty, from a stale projection (orphans included), and after time
passed (docs/domain.md §13 "Backfill")."""

from __future__ import annotations

import random

from sqlalchemy import text

from app.infestations import maintenance
from app.kernel import db
from tests import factories as f
from tests.infestations.support import (
    LONELY,
    clear_projection,
    random_registry,
    refresh_each_key,
    set_listing,
    shift_clock,
    snapshot,
)
from tests.sql import rows


async def shuffle_source(rng: random.Random) -> None:
    """Source changes no drain has seen: statuses, a delisting, a relisting, a report restricted."""
    async with db.transaction() as session:
        for status in ("fixed", "verified", "open"):
            await session.execute(
                text(
                    "UPDATE canonical_findings SET status = :s, updated_at = now() WHERE id IN "
                    "(SELECT id FROM canonical_findings ORDER BY md5(id::text || :s) LIMIT 8)"
                ),
                {"s": status},
            )
        await session.execute(text("UPDATE scans SET visibility = 'restricted' WHERE id = (SELECT min(id) FROM scans)"))
    ids = [row["id"] for row in await rows("SELECT id FROM repositories ORDER BY id")]
    await set_listing(ids[0], "listed")
    await set_listing(ids[1], "pending")
    await set_listing(ids[rng.randrange(2, len(ids))], "pending")
    async with db.transaction() as session:  # the lonely pattern's other repository's report is restricted
        await session.execute(
            text(
                "UPDATE scans SET visibility = 'restricted' WHERE id IN (SELECT f.scan_id FROM scan_findings f "
                "JOIN canonical_findings c ON c.id = f.canonical_finding_id WHERE c.title LIKE 'Lonely%')"
            )
        )


async def test_set_based_backfill_and_window_recompute_equal_per_key_refreshes() -> None:
    rng = random.Random(15)
    await random_registry(rng, await f.create_account())

    # from empty: ranges cut the 14 keys anywhere (7 ranges, 2 at a time)
    await refresh_each_key()
    expected = await snapshot()
    assert expected["infestation_pattern_status_windows"], "the random registry has status windows"
    assert LONELY in {p["pattern_key"] for p in expected["infestation_patterns"]}
    await clear_projection()
    assert await maintenance.backfill(progress=None, concurrency=2, ranges=7) == len(expected["infestation_patterns"])
    assert await snapshot() == expected

    # from a stale projection: keys that left the join set (orphans) go, changed ones follow the source
    await shuffle_source(rng)
    await maintenance.backfill(progress=None, ranges=3)
    after_backfill = await snapshot()
    assert LONELY not in {p["pattern_key"] for p in after_backfill["infestation_patterns"]}
    await clear_projection()
    await refresh_each_key()
    assert after_backfill == await snapshot()
    assert after_backfill != expected

    # time passes: the set-based window recompute equals a refresh from source
    await shift_clock(45)
    assert await maintenance.recompute_all_windows(ranges=5) == len(after_backfill["infestation_patterns"])
    recomputed = await snapshot()
    await clear_projection()
    await refresh_each_key()
    assert recomputed == await snapshot()
    assert recomputed["infestation_patterns"] != after_backfill["infestation_patterns"]
