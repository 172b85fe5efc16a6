"""Anonymous status-filtered atlas lists (a live aggregate) are cached single-flight by their clamped filters, a
takedown is seen at the next request, a signed-in viewer's list never enters the shared cache, and a list past the
server's statement timeout is load shedding (503 with Retry-After), not a 500 or a hang (docs/security.md
"Limits")."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.infestations import queries
from app.kernel import db
from app.moderation import service
from e2e.seed import seed_pattern
from tests import factories
from tests.moderation.support import act_as
from tests.sql import get_while_locked

NOTES = "Quarantined while its history is checked."
OPEN = "/infestations.json?status=open&days=365"


def items(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text[:200]
    found: list[dict[str, Any]] = response.json()["items"]
    return found


async def test_identical_anonymous_status_lists_run_the_aggregate_once_per_ttl(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    seeded = await seed_pattern("Hardcoded secret in config", repos=3)
    # days past the clamp and the default min_repos spelled out are the same clamped filters: one entry
    for url in (OPEN, "/infestations.json?status=open&days=9999", f"{OPEN}&min_repos=2", OPEN):
        assert [i["pattern_key"] for i in items(await client.get(url))] == [seeded.key]
    assert queries.status_list_cache.cache.loads == 1
    answers = await asyncio.gather(*(client.get("/infestations.json?status=open&days=90") for _ in range(8)))
    assert all(len(items(a)) == 1 for a in answers)
    assert queries.status_list_cache.cache.loads == 2  # eight concurrent identical requests, one aggregate
    assert (await client.get("/infestations?status=open&days=90")).status_code == 200  # the page shares it
    assert queries.status_list_cache.cache.loads == 2
    assert len(items(await client.get("/infestations.json?status=fixed&days=90"))) == 0
    assert queries.status_list_cache.cache.loads == 3  # another status is another entry

    monkeypatch.setattr(queries, "STATUS_CACHE_SECONDS", 0.2)
    await client.get(OPEN)
    await asyncio.sleep(0.3)
    await client.get(OPEN)
    assert queries.status_list_cache.cache.loads == 5  # once on the new TTL, once after it expired


async def test_the_unfiltered_atlas_does_not_use_the_status_cache(client: httpx.AsyncClient) -> None:
    await seed_pattern("Hardcoded secret in config", repos=2)
    for _ in range(2):
        assert len(items(await client.get("/infestations.json?days=365"))) == 1
    assert queries.status_list_cache.cache.loads == 0


async def test_a_quarantine_is_reflected_at_the_next_identical_status_list(client: httpx.AsyncClient) -> None:
    seeded = await seed_pattern("Hardcoded secret in config", repos=2)
    moderator = await factories.create_account(platform_role="moderator")
    [before] = items(await client.get(OPEN))
    sample = before["sample_occurrence_public_id"]
    assert sample is not None
    async with db.read_session(replica=False) as session:
        repository_id = (
            await session.execute(
                text(
                    "SELECT s.repository_id FROM scan_findings f JOIN scans s ON s.id = f.scan_id "
                    "WHERE f.public_id = CAST(:id AS uuid)"
                ),
                {"id": sample},
            )
        ).scalar_one()
    [repo] = [r for r in seeded.repositories if r.id == repository_id]
    await service.change_repository_listing(
        moderator, repo.host, repo.owner, repo.name, "quarantined", "malware", NOTES
    )
    [after] = items(await client.get(OPEN))  # well within the TTL, before any rollup refresh
    assert after["pattern_key"] == seeded.key
    assert after["sample_occurrence_public_id"] is None and after["sample_file_path"] is None
    assert queries.status_list_cache.cache.loads == 2


async def test_a_signed_in_viewers_status_list_never_enters_the_shared_cache(client: httpx.AsyncClient) -> None:
    await seed_pattern("Hardcoded secret in config", repos=2)
    await act_as(client, await factories.create_account(platform_role="moderator"))
    for _ in range(3):
        assert len(items(await client.get(OPEN))) == 1
    assert queries.status_list_cache.cache.loads == 0
    await act_as(client, None)
    assert len(items(await client.get(OPEN))) == 1
    assert queries.status_list_cache.cache.loads == 1


@pytest.mark.parametrize("path", [OPEN, "/infestations?status=open&days=365"])
async def test_a_status_list_past_the_statement_timeout_answers_503_with_retry_after(
    client: httpx.AsyncClient, tiny_statement_timeout: None, path: str
) -> None:
    await seed_pattern("Hardcoded secret in config", repos=2)
    # another connection holds the table: the aggregate waits until its statement is cancelled
    response, waited = await get_while_locked(client, path, "infestation_pattern_instances")
    assert response.status_code == 503, response.text[:200]
    assert response.headers["retry-after"] == "10"
    assert waited < 5
    assert len(items(await client.get(OPEN))) == 1  # nothing failed was cached
