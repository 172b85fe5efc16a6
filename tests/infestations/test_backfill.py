"""The set-based backfill and window recompute (key ranges, a few statements each) leave exactly the rollups that
per-key refreshes leave, on random data: from empty, from a stale projection (orphans included), and after time
passed (docs/domain.md §13 "Backfill")."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

from sqlalchemy import text

from app.accounts.models import Account
from app.infestations import maintenance, projection
from app.kernel import db
from app.reports.finding_memory import pattern_key
from tests import factories as f
from tests.infestations.support import shift_clock
from tests.sql import rows

STATUSES = ("open", "open", "verified", "disputed", "fixed")
TABLES = {
    "infestation_pattern_instances": "canonical_finding_id",
    "infestation_pattern_repos": "pattern_key, repository_id",
    "infestation_patterns": "pattern_key",
    "infestation_pattern_status_windows": "pattern_key, status, window_days",
}
LONELY = pattern_key("Lonely pattern in two repositories")
CLOCKS = ("inserted_at", "updated_at", "refreshed_at")  # when a row was written, not what it says


async def snapshot() -> dict[str, list[dict[str, Any]]]:
    return {
        table: [
            {k: v for k, v in row.items() if not (table != "infestation_pattern_instances" and k in CLOCKS)}
            for row in await rows(f"SELECT * FROM {table} ORDER BY {order}")
        ]
        for table, order in TABLES.items()
    }


async def clear_projection() -> None:
    async with db.transaction() as session:
        for table in TABLES:
            await session.execute(text(f"DELETE FROM {table}"))


async def refresh_each_key() -> None:
    """The reference: one `refresh_pattern` per key of the source and of the projection."""
    keys = await rows(
        "SELECT pattern_key FROM canonical_findings WHERE pattern_key <> '' "
        "UNION SELECT pattern_key FROM infestation_patterns"
    )
    for row in keys:
        await projection.refresh_pattern(row["pattern_key"])


async def random_registry(rng: random.Random, reporter: Account) -> None:
    repos = [await f.create_repository() for _ in range(6)]
    titles = [f"Random pattern {n} in handler" for n in range(14)]
    now = db.utcnow()
    for _ in range(70):
        age = timedelta(hours=rng.choice((1, 100, 400, 1500, 5000, 9000)))
        await f.create_instance(
            rng.choice(repos),
            reporter,
            rng.choice(titles),
            status=rng.choice(STATUSES),
            visibility=rng.choice(("public", "public", "public", "restricted")),
            updated_at=now - age,
            inserted_at=now - age - timedelta(hours=rng.randrange(1, 500)),
        )
    await set_listing(repos[0].id, "quarantined")
    for repo in repos[1:3]:  # a pattern of two repositories only, one of which shuffle_source delists
        await f.create_instance(repo, reporter, "Lonely pattern in two repositories")


async def set_listing(repository_id: int, listing: str) -> None:
    async with db.transaction() as session:
        await session.execute(
            text("UPDATE repositories SET listing_status = :l WHERE id = :id"), {"l": listing, "id": repository_id}
        )


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
