"""The bulk export's `precision.ndjson.gz` (issue 38 item 4): the rows of `/stats/precision.json`, each with the
grouping it is listed under."""

from __future__ import annotations

from pathlib import Path

import httpx

from app.exports import service
from tests import factories
from tests.exports.support import records
from tests.sql import execute

# a decided outcome without a review: the evidence check refused the submission (its refusal log is the subject)
_REFUSED = """
WITH r AS (INSERT INTO report_refusals (account_id, reason) VALUES (:account, 'file_missing') RETURNING id)
INSERT INTO finding_outcomes (refusal_id, account_id, provenance, model, prompt_version, outcome, reason, decided_at)
SELECT r.id, :account, 'agent', 'model-q', 'q/2', 'refused', 'refused at its commit', now() FROM r
"""


async def test_precision_file_holds_the_rows_of_the_stats_twin(client: httpx.AsyncClient, tmp_path: Path) -> None:
    for _n in range(3):
        account = await factories.create_account()
        for _ in range(2):
            await execute(_REFUSED, account=account.id)
    twin = (await client.get("/stats/precision.json")).json()
    assert len(twin["by_model"]) == 1 and len(twin["by_provenance"]) == 1

    await service.write_export(tmp_path / "out")

    exported = records(tmp_path / "out", "precision.ndjson.gz")
    assert exported == [{"grouping": name, **row} for name, rows in twin.items() for row in rows]
    assert {r["grouping"] for r in exported} == {"by_provenance", "by_model"}
