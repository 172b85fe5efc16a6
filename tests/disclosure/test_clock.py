"""The clock that publishes (docs/domain.md "Coordinated disclosure"): `tarakan disclosures publish-due --now T`
publishes what is due as of T and nothing before it, through the same path as any publication (the finding's page,
one `finding.published` on the feed); the worker's run publishes what is due now, and the metrics show how late."""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY
from sqlalchemy import text

from app.disclosure.cli import _list, parse_now
from app.disclosure.clock import publish_due
from app.kernel import db
from app.ops import gauges
from app.reports.service import submit_report
from jobs.worker import disclosure_clock_job
from tests import factories
from tests.harness import tarakan
from tests.reports.support import finding, report_body

TITLE = "Race in the session store"
LATENESS = "tarakan_disclosure_publish_lateness_seconds_count"
OVERDUE = "tarakan_disclosure_oldest_overdue_seconds"

_CLOCK = text("SELECT state, deadline, published_at, published_because, now() AS at FROM disclosures")


async def embargoed(days: int = 30) -> dict[str, Any]:
    repo = await factories.create_repository("clockco", "clockrepo")
    author = await factories.create_account(state="active")
    body = report_body([finding(title=TITLE)], disclosure={"days": days})
    answer = await submit_report(author, repo.host, repo.owner, repo.name, body)
    held: dict[str, Any] = answer["findings"][0]
    assert held["held"] == "embargo"
    return held


async def clock() -> Any:
    async with db.read_session(replica=False) as session:
        return (await session.execute(_CLOCK)).one()


async def published_entries(client: httpx.AsyncClient) -> list[str]:
    entries = (await client.get("/api/v1/changes", params={"limit": 1000})).json()["entries"]
    return [str(e["finding"]) for e in entries if e["kind"] == "finding.published"]


async def test_publish_due_publishes_at_the_deadline_not_a_minute_before(
    client: httpx.AsyncClient, capsys: pytest.CaptureFixture[str]
) -> None:
    held = await embargoed()
    deadline = (await clock()).deadline
    assert deadline - (await clock()).at > timedelta(days=29)

    await _list(argparse.Namespace())
    listed = capsys.readouterr().out.splitlines()
    assert listed[1:] == [f"github.com/clockco/clockrepo\thigh\t{listed[1].split()[2]}\t{deadline.isoformat()}"]

    assert await publish_due(deadline - timedelta(minutes=1)) == 0
    assert (await client.get(f"/findings/{held['public_id']}")).status_code == 404
    assert held["public_id"] not in await published_entries(client)

    ran = await tarakan("disclosures", "publish-due", "--now", (deadline + timedelta(minutes=1)).isoformat())
    assert (ran.code, ran.out.strip()) == (0, "published: 1 embargoed finding(s) whose deadline passed"), ran
    assert (await client.get(f"/findings/{held['public_id']}")).status_code == 200
    assert (await published_entries(client)).count(held["public_id"]) == 1
    row = await clock()
    assert (row.state, row.published_because) == ("published", "deadline")
    assert row.published_at < deadline  # the real time, not --now's

    assert await publish_due() == 0  # nothing else is due
    await _list(argparse.Namespace())
    assert capsys.readouterr().out.strip() == "no open embargo"


async def test_a_bad_now_is_one_line_and_exit_2() -> None:
    ran = await tarakan("disclosures", "publish-due", "--now", "next tuesday")
    assert ran.code == 2 and len(ran.err.strip().splitlines()) == 1, ran
    assert ran.err.startswith("tarakan: error: --now 'next tuesday': must be an ISO-8601 date-time with an offset")
    assert parse_now("2026-12-03T18:00:00") is None  # no offset: no instant
    assert parse_now("2026-12-03T18:00:00+01:00") is not None


async def test_the_worker_publishes_what_is_due_and_metrics_show_how_late(client: httpx.AsyncClient) -> None:
    async def overdue() -> float:
        await gauges.refresh_gauges()  # what a scrape of /metrics reads
        return REGISTRY.get_sample_value(OVERDUE) or 0.0

    held = await embargoed(7)
    assert await overdue() == 0.0  # not due yet
    async with db.transaction() as session:  # the worker stopped for 20 minutes past the deadline
        await session.execute(text("UPDATE disclosures SET deadline = now() - interval '20 minutes'"))
    assert 1200 <= await overdue() < 1260
    counted = REGISTRY.get_sample_value(LATENESS) or 0.0

    assert await disclosure_clock_job({}) == {"published": 1}  # the worker's minute
    assert await overdue() == 0.0
    assert REGISTRY.get_sample_value(LATENESS) == counted + 1
    assert (await client.get(f"/findings/{held['public_id']}")).status_code == 200
