"""The change feed at a tier (issue 14 item 8): page p95 of `GET /api/v1/changes`, and what the feed costs writers.

On a throw-away embedded Postgres + Valkey: migrate to 0004, generate the registry in SQL (bench/generate.py; Tier B
is 10^5 repositories, about 10^6 occurrences), then run migration 0005, which seeds the feed set-based with what is
public (the deploy-time path; timed). Then takedowns through the real write side (`outbox.mark_scan_dirty` /
`mark_repository_dirty` after the state change, as the moderation services do: restricted reports and quarantined
repositories), and status changes under the hottest pattern key (`outbox.mark_dirty`, as a check does), each timed
per transaction, so the feed holds redacted entries too. Last, a real `tarakan serve` answers feed pages at random
cursors across the whole feed (limit 100, the default, and 1000, the maximum) and at the end (a client polling):
client round trip and server time (Server-Timing). Raw results: `bench/out/feed.json`.

    .venv/bin/python -m bench.feed_bench --tier B [--runs 300] [--no-write]
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import time
from typing import Any

import httpx
import psycopg
from alembic import command

from bench.common import (
    bench_parser,
    publish,
    server_ms,
    summary,
    timed_generate,
    vacuum_analyze,
)
from bench.services import throwaway_services
from tests.harness import stop

HEADING = "## Change feed (issue 14 item 8)"
HOT_TITLE = "shared pattern 1 injection in handler"  # the hottest pattern of bench/generate.py


def scalar(dsn: str, sql: str) -> Any:
    return fetch(dsn, sql)[0][0]


def fetch(dsn: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return list(conn.execute(sql, params).fetchall())


async def write_side(dsn: str, takedowns: int, quarantines: int, statuses: int) -> dict[str, Any]:
    """Transactions from the state change to the commit, in two halves on different rows: through the outbox, as
    the services do (the feed diff and the dirty-key marking), and with the feed diff alone (`changes.sync_*`),
    its share."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import AsyncSession

    from app.kernel import db
    from app.record import changes, outbox
    from app.reports.finding_memory import pattern_key

    rng = random.Random(14)
    scan_ids = [
        int(r[0])
        for r in fetch(
            dsn,
            "SELECT s.id FROM scans s JOIN repositories r ON r.id = s.repository_id "
            "WHERE s.visibility = 'public' AND r.listing_status = 'listed' ORDER BY s.id",
        )
    ]
    repo_ids = [
        int(r[0]) for r in fetch(dsn, "SELECT id FROM repositories WHERE listing_status = 'listed' ORDER BY id")
    ]
    hot = pattern_key(HOT_TITLE)
    canonicals = [
        int(r[0])
        for r in fetch(
            dsn,
            "SELECT canonical_id FROM published_canonicals pc JOIN canonical_findings c ON c.id = pc.canonical_id "
            "WHERE c.pattern_key = %s AND c.status <> 'verified' ORDER BY canonical_id",
            (hot,),
        )
    ]

    async def restrict(session: AsyncSession, scan_id: int, feed_only: bool) -> None:
        await session.execute(text("UPDATE scans SET visibility = 'restricted' WHERE id = :id"), {"id": scan_id})
        if feed_only:
            await changes.sync_scan(session, scan_id)
        else:
            await outbox.mark_scan_dirty(session, scan_id, "visibility")

    async def quarantine(session: AsyncSession, repository_id: int, feed_only: bool) -> None:
        await session.execute(
            text("UPDATE repositories SET listing_status = 'quarantined' WHERE id = :id"), {"id": repository_id}
        )
        if feed_only:
            await changes.sync_repository(session, repository_id)
        else:
            await outbox.mark_repository_dirty(session, repository_id, "listing_change")

    async def verify(session: AsyncSession, canonical_id: int, feed_only: bool) -> None:
        await session.execute(
            text("UPDATE canonical_findings SET status = 'verified', updated_at = now() WHERE id = :id"),
            {"id": canonical_id},
        )
        if feed_only:
            await changes.sync_statuses(session, [hot])
        else:
            await outbox.mark_dirty(session, [hot], "status")

    out: dict[str, Any] = {"hot_key_published_canonicals": len(canonicals)}
    for name, step, ids, n in (
        ("restrict_report", restrict, scan_ids, takedowns),
        ("quarantine_repository", quarantine, repo_ids, quarantines),
        ("status_under_hot_key", verify, canonicals, statuses),
    ):
        sample = rng.sample(ids, min(2 * n, len(ids)))
        for label, feed_only, half in (("outbox", False, sample[::2]), ("feed_only", True, sample[1::2])):
            times: list[float] = []
            for row_id in half:
                started = time.perf_counter()
                async with db.transaction() as session:
                    await step(session, row_id, feed_only)
                times.append(time.perf_counter() - started)
            out[f"{name}_{label}"] = summary(times)
    await db.dispose_engines()
    return out


def read_side(base: str, last_seq: int, runs: int) -> dict[str, Any]:
    from app.record.changes import cursor_at

    rng = random.Random(15)
    out: dict[str, Any] = {}
    with httpx.Client(base_url=base, timeout=30) as client:
        cases: tuple[tuple[str, int, int, bool], ...] = (
            ("page_100", 100, runs, True),
            ("page_1000", 1000, max(20, runs // 5), True),
            ("tail_poll", 100, runs, False),  # at the end: the cursor a caught-up mirror polls from
        )
        for name, limit, n, anywhere in cases:

            def params(limit: int = limit, anywhere: bool = anywhere) -> dict[str, str | int]:
                return {"cursor": cursor_at(rng.randint(1, last_seq) if anywhere else last_seq + 1), "limit": limit}

            for _ in range(3):
                client.get("/api/v1/changes", params=params())
            times, server, sizes, redacted = [], [], [], 0
            for _ in range(n):
                started = time.perf_counter()
                r = client.get("/api/v1/changes", params=params())
                times.append(time.perf_counter() - started)
                assert r.status_code == 200, r.text
                server.append(server_ms(r) / 1000)
                sizes.append(len(r.content))
                entries = r.json()["entries"]
                redacted += sum(1 for e in entries if e["kind"] == "finding.published" and "canonical" not in e)
            out[name] = {
                **summary(times),
                "server": summary(server),
                "bytes_p50": statistics.median(sizes),
                "redacted_entries_seen": redacted,
            }
            print(f"  {name}: {json.dumps(out[name])}", flush=True)
    return out


def run(tier_name: str, runs: int) -> dict[str, Any]:
    with throwaway_services("tarakan-feed-bench-") as services:
        env = services.use("0004")
        from app.migrate import alembic_config

        rows, generated = timed_generate(services.dsn, tier_name)
        vacuum_analyze(services.dsn)
        started = time.perf_counter()
        command.upgrade(alembic_config(), "0005")  # the seed: everything public, set-based, in one transaction
        seeded = time.perf_counter() - started
        command.upgrade(alembic_config(), "head")
        seed_entries = int(scalar(services.dsn, "SELECT count(*) FROM changes"))
        print(
            f"[{tier_name}] generated in {generated:.0f}s; migration 0005 seeded {seed_entries:,} entries "
            f"in {seeded:.0f}s",
            flush=True,
        )
        writes = asyncio.run(write_side(services.dsn, takedowns=100, quarantines=20, statuses=40))
        print(f"  writes: {json.dumps(writes)}", flush=True)
        vacuum_analyze(services.dsn)
        kinds = {str(k): int(n) for k, n in fetch(services.dsn, "SELECT kind, count(*) FROM changes GROUP BY kind")}
        last_seq = int(scalar(services.dsn, "SELECT max(seq) FROM changes"))
        proc, base = services.serve(env)
        load = os.getloadavg()[0]
        reads = read_side(base, last_seq, runs)
        load = max(load, os.getloadavg()[0])
        stop(proc)
        return {
            "tier": tier_name,
            "rows": rows,
            "generate_s": generated,
            "seed_s": seeded,
            "seed_entries": seed_entries,
            "kinds": kinds,
            "last_seq": last_seq,
            "writes": writes,
            "reads": reads,
            "load": load,
        }


def render(r: dict[str, Any], command_line: str) -> str:
    rows, reads, writes = r["rows"], r["reads"], r["writes"]

    def pair(x: dict[str, float]) -> str:
        return f"{x['p50_ms']:.1f} / {x['p95_ms']:.1f}"

    lines = [
        HEADING,
        "",
        f"Command: `{command_line}` (a real `tarakan serve`; load average up to {r['load']:.1f} during the reads). "
        "Times in ms, p50 / p95.",
        "",
        f"Tier {r['tier']}: {rows['repositories']:,} repositories, {rows['scan_findings']:,} occurrences. Migration "
        f"0005 seeded the feed with {r['seed_entries']:,} entries in {r['seed_s']:.1f} s (set-based, one "
        f"transaction; generation {r['generate_s']:.1f} s); {r['last_seq']:,} entries after the write runs.",
        "",
        "| read (`GET /api/v1/changes`) | requests | client round trip | server time | body p50 |",
        "|---|---|---|---|---|",
    ]
    for name, label in (
        ("page_100", "page of 100 (default) at a random cursor"),
        ("page_1000", "page of 1000 (maximum) at a random cursor"),
        ("tail_poll", "at the end (a mirror polling)"),
    ):
        x = reads[name]
        lines.append(f"| {label} | {x['n']} | {pair(x)} | {pair(x['server'])} | {x['bytes_p50'] / 1024:.1f} kB |")
    lines += [
        "",
        f"| write, state change to commit ({writes['restrict_report_outbox']['n']}, "
        f"{writes['quarantine_repository_outbox']['n']}, {writes['status_under_hot_key_outbox']['n']} runs of each) "
        "| through the outbox | feed diff alone |",
        "|---|---|---|",
        f"| restrict one report | {pair(writes['restrict_report_outbox'])} | {pair(writes['restrict_report_feed_only'])} |",
        f"| quarantine one repository | {pair(writes['quarantine_repository_outbox'])} | "
        f"{pair(writes['quarantine_repository_feed_only'])} |",
        f"| status change under the hottest key ({writes['hot_key_published_canonicals']:,} published canonicals) | "
        f"{pair(writes['status_under_hot_key_outbox'])} | {pair(writes['status_under_hot_key_feed_only'])} |",
        "",
        "The feed diff is a few index probes per report or repository; what a quarantine costs beyond it is the "
        "outbox's key discovery (`KEYS_FOR_REPOSITORY`), not the feed. The tail poll is a request's fixed cost.",
        "",
        f"Redacted entries met by the readers: {reads['page_100']['redacted_entries_seen']} (from current visibility).",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    args = bench_parser(__doc__, runs=300).parse_args()
    publish("feed", run(args.tier, args.runs), render, HEADING, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
