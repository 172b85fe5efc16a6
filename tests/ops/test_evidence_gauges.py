"""/metrics: the evidence gate's gauges (docs/operations.md "TarakanEvidencePendingOld"), read from the database."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from app.kernel import db
from app.ops import gauges
from tests import factories as f

PENDING, OLDEST = "tarakan_evidence_pending", "tarakan_evidence_oldest_pending_seconds"

# what the submission gate stores when the forge cannot decide (docs/domain.md "Evidence at the commit")
_HOLD = """
UPDATE scans SET published_at = NULL, evidence_next_at = now() + interval '30 seconds',
  inserted_at = now() - interval '2 hours' WHERE id = :scan
"""
_HOLD_FINDINGS = """
UPDATE scan_findings SET evidence_state = 'pending', published_at = NULL, canonical_finding_id = NULL
WHERE scan_id = :scan
"""
_DECIDE = "UPDATE scans SET published_at = now(), evidence_next_at = NULL WHERE id = :scan"
_CONFIRM = "UPDATE scan_findings SET evidence_state = 'confirmed', published_at = now() WHERE scan_id = :scan"


async def scrape(client: httpx.AsyncClient) -> dict[str, float]:
    gauges.forget_readings()
    body = (await client.get("/metrics")).text
    families = {family.name: family for family in text_string_to_metric_families(body)}
    return {name: families[name].samples[0].value for name in (PENDING, OLDEST)}


async def test_pending_findings_and_the_oldest_pending_report_are_on_metrics(client: httpx.AsyncClient) -> None:
    assert await scrape(client) == {PENDING: 0.0, OLDEST: 0.0}
    author, repo = await f.create_account(), await f.create_repository()
    await f.create_instance(repo, author, "Checked before the gate")  # unchecked: not pending
    held = await f.create_scan(repo, author)
    for position, title in enumerate(("Open redirect in login", "Weak session secret")):
        await f.create_occurrence(held, await f.create_canonical(repo, title), position=position)
    async with db.transaction() as session:
        await session.execute(text(_HOLD), {"scan": held.id})
        await session.execute(text(_HOLD_FINDINGS), {"scan": held.id})

    waiting = await scrape(client)
    assert waiting[PENDING] == 2
    assert 7200 <= waiting[OLDEST] < 7300

    async with db.transaction() as session:  # the worker decided it: nothing waits
        await session.execute(text(_CONFIRM), {"scan": held.id})
        await session.execute(text(_DECIDE), {"scan": held.id})
    assert await scrape(client) == {PENDING: 0.0, OLDEST: 0.0}
