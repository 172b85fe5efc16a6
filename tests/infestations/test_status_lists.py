"""Status-filtered atlas lists read the per-status window rollups (docs/domain.md §5.7): every status x window walks
the one partial rank index in O(limit), nothing is cached, a takedown shows at the next request, and a list past the
server's statement timeout is load shedding (503 with Retry-After), not a 500 or a hang (docs/security.md "Limits")."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.infestations.queries import list_infestations_rollup, status_list_sql
from app.kernel import db
from app.kernel.sql import WINDOW_DAYS
from app.moderation import service
from app.reports.models import CANONICAL_STATUSES
from e2e.seed import seed_pattern
from tests import factories
from tests.infestations.support import ago, back_rollups_with_visible_rows
from tests.sql import get_while_locked, scalar

NOTES = "Quarantined while its history is checked."
OPEN = "/infestations.json?status=open&days=365"


def items(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text[:200]
    found: list[dict[str, Any]] = response.json()["items"]
    return found


async def _bulk_status_windows(count: int) -> None:
    """`count` patterns, each with a row per status x window of deterministic, varied counts (direct SQL: ranking
    input only), backed by visible rows so the read-time guard keeps them."""
    async with db.transaction() as session:
        await session.execute(
            text(
                "INSERT INTO infestation_patterns (pattern_key, title, refreshed_at) "
                "SELECT encode(sha256(g::text::bytea), 'hex'), 'pattern ' || g, now() FROM generate_series(1, :n) g"
            ),
            {"n": count},
        )
        await session.execute(
            text(
                "INSERT INTO infestation_pattern_status_windows "
                "(pattern_key, status, window_days, repo_count, instance_count, last_seen_at) "
                "SELECT encode(sha256(g::text::bytea), 'hex'), s, w, (g * (7 + w) + length(s)) % 9, 9, "
                "now() - ((g * 13 + length(s)) % ((CASE WHEN w = 0 THEN 400 ELSE w END) * 24 + 48)) * interval '1 hour' "
                "FROM generate_series(1, :n) g, unnest(CAST(:statuses AS text[])) s, "
                "unnest(CAST(:windows AS int[])) w"
            ),
            {"n": count, "statuses": list(CANONICAL_STATUSES), "windows": [0, *WINDOW_DAYS]},
        )
    await back_rollups_with_visible_rows()


async def test_every_status_list_walks_the_rank_index_in_the_documented_order() -> None:
    await _bulk_status_windows(1500)
    async with db.read_session(replica=False) as session:
        await session.execute(text("ANALYZE infestation_pattern_status_windows"))
        rows = (await session.execute(text("SELECT * FROM infestation_pattern_status_windows"))).mappings().all()
        for status in CANONICAL_STATUSES:
            for w in WINDOW_DAYS:
                since = ago(w)
                params = {"status": status, "min_repos": 3, "since": since, "limit": 40}
                plan = "\n".join(r[0] for r in await session.execute(text("EXPLAIN " + status_list_sql(w)), params))
                assert "infestation_pattern_status_windows_rank_idx" in plan, plan
                assert "Sort" not in plan.split("infestation_pattern_status_windows_rank_idx")[0], plan
                expected = sorted(
                    (
                        r
                        for r in rows
                        if r["status"] == status
                        and r["window_days"] == w
                        and r["repo_count"] >= 3
                        and r["last_seen_at"] >= since
                    ),
                    key=lambda r: (-r["repo_count"], -r["last_seen_at"].timestamp(), r["pattern_key"]),
                )[:40]
                got = await list_infestations_rollup(days=w, min_repos=3, status=status, limit=40)
                assert [(i["pattern_key"], i["repo_count"]) for i in got] == [
                    (r["pattern_key"], r["repo_count"]) for r in expected
                ], (status, w)
                assert len(got) == 40


async def test_a_quarantine_is_reflected_at_the_next_status_list(client: httpx.AsyncClient) -> None:
    seeded = await seed_pattern("Hardcoded secret in config", repos=2)
    moderator = await factories.create_account(platform_role="moderator")
    [before] = items(await client.get(OPEN))
    sample = before["sample_occurrence_public_id"]
    assert sample is not None
    repository_id = await scalar(
        "SELECT s.repository_id FROM scan_findings f JOIN scans s ON s.id = f.scan_id WHERE f.public_id = CAST(:id AS uuid)",
        id=sample,
    )
    [repo] = [r for r in seeded.repositories if r.id == repository_id]
    await service.change_repository_listing(
        moderator, repo.host, repo.owner, repo.name, "quarantined", "malware", NOTES
    )
    [after] = items(await client.get(OPEN))  # the next request, before any rollup refresh
    assert after["pattern_key"] == seeded.key
    assert after["sample_occurrence_public_id"] is None and after["sample_file_path"] is None
    other = next(r for r in seeded.repositories if r.id != repository_id)
    await service.change_repository_listing(
        moderator, other.host, other.owner, other.name, "quarantined", "malware", NOTES
    )
    assert items(await client.get(OPEN)) == []  # no visible row left: the pattern is gone at once


@pytest.mark.parametrize("path", [OPEN, "/infestations?status=open&days=365"])
async def test_a_status_list_past_the_statement_timeout_answers_503_with_retry_after(
    client: httpx.AsyncClient, tiny_statement_timeout: None, path: str
) -> None:
    await seed_pattern("Hardcoded secret in config", repos=2)
    # another connection holds the table: the read waits until its statement is cancelled
    response, waited = await get_while_locked(client, path, "infestation_pattern_status_windows")
    assert response.status_code == 503, response.text[:200]
    assert response.headers["retry-after"] == "10"
    assert waited < 5
    assert len(items(await client.get(OPEN))) == 1
