"""Infestation read/write benchmark (issue 3 item 10, issue 4 item 9). Not a test: prints figures and writes
them to docs/benchmarks.md.

    .venv/bin/python -m bench.infestations_bench --tier A      # ~2 min
    .venv/bin/python -m bench.infestations_bench --tier B      # ~15-25 min on 2 cores

Each tier runs on a throw-away embedded Postgres + Valkey: generate the registry in SQL (bench/generate.py),
backfill the rollups through the real `backfill`, then time both paths in the same run (machines are noisy;
the ratios hold): list legacy vs rollup per window (wall time and database execution time from EXPLAIN ANALYZE),
get, instance pages, repository pages, refresh of the hot key, commit-to-rollup lag under a sustained report
rate with a real `tarakan worker`, and page budgets against a real `tarakan serve`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
from sqlalchemy import text

from bench.common import pct, write_section
from bench.generate import TIERS, Tier, generate, restore_tier, save_tier
from bench.services import throwaway_services
from tests.harness import ROOT, spawn, start_server

HOT_TITLE = "shared pattern 1 injection in handler"
STATUSES = ("open", "verified", "disputed", "fixed")


def summary(values: list[float]) -> dict[str, float]:
    return {"p50_ms": statistics.median(values) * 1000, "p95_ms": pct(values, 0.95) * 1000, "n": len(values)}


async def timed(fn: Callable[[], Awaitable[Any]], runs: int, warmup: int = 2) -> list[float]:
    for _ in range(warmup):
        await fn()
    out: list[float] = []
    for _ in range(runs):
        t = time.perf_counter()
        await fn()
        out.append(time.perf_counter() - t)
    return out


def explain_ms(dsn: str, sql: str, params: dict[str, Any], runs: int, warmup: int = 2) -> list[float]:
    """Database execution time of one statement (EXPLAIN ANALYZE), seconds."""
    out: list[float] = []
    with psycopg.connect(dsn) as conn:
        for i in range(runs + warmup):
            plan = conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", params).fetchone()[0]  # type: ignore[index]
            if i >= warmup:
                out.append((plan[0]["Execution Time"] + plan[0].get("Planning Time", 0)) / 1000)
    return out


def legacy_list_sql(status: str | None) -> str:
    from app.infestations import legacy

    return legacy.list_sql(status_filter=status is not None).sql


# at a bulk tier a legacy list takes tens of seconds: measured for these filters only, once each, no warm-up
LEGACY_SAMPLE = {(None, 30), (None, 365), ("open", 30), ("open", 365)}


async def measure_lists(
    dsn: str, results: dict[str, Any], runs: int, legacy_runs: int, legacy_sample: bool = False
) -> None:
    """Every filter combination (unfiltered and each status, x every window), both paths in the same run: wall time
    in process and database time (EXPLAIN ANALYZE: planning + execution) of the list statement."""
    from app.infestations import legacy, queries

    names = ("min_repos", "since", "limit", "status")
    for status in (None, *STATUSES):
        for window in (7, 30, 90, 365):
            opts: dict[str, Any] = {"days": window, "limit": 50, "status": status}
            rollup = await timed(functools.partial(queries.list_infestations_rollup, **opts), runs)
            sql = queries.ranked_list_sql(window) if status is None else queries.status_list_sql(window)
            since = datetime.now(UTC) - timedelta(days=window)
            params = {"min_repos": 2, "since": since, "limit": 50, "status": status}
            db_time = explain_ms(dsn, _psycopg_params(sql, names), params, runs // 2)
            entry: dict[str, Any] = {"rollup": summary(rollup), "rollup_db": summary(db_time)}
            if legacy_runs and (not legacy_sample or (status, window) in LEGACY_SAMPLE):
                warm = 0 if legacy_sample else 1
                legacy_fn = functools.partial(legacy.list_infestations_legacy, **opts)
                legacy_t = await timed(legacy_fn, legacy_runs, warmup=warm)
                legacy_sql = _psycopg_params(legacy_list_sql(status), names)
                legacy_db = explain_ms(dsn, legacy_sql, params, legacy_runs, warmup=warm)
                entry |= {
                    "legacy": summary(legacy_t),
                    "legacy_db": summary(legacy_db),
                    "speedup_p50": statistics.median(legacy_t) / statistics.median(rollup),
                    "db_speedup_p50": statistics.median(legacy_db) / statistics.median(db_time),
                }
            name = f"list_{status or 'all'}_{window}d"
            results[name] = entry
            print(f"  {name}: {json.dumps(entry)}", flush=True)


async def measure_reads(dsn: str, results: dict[str, Any], runs: int) -> None:
    from app.infestations import memberships, queries
    from app.reports.finding_memory import pattern_key

    hot = pattern_key(HOT_TITLE)
    results["get_hot"] = summary(await timed(lambda: queries.get_infestation(hot), runs))
    first = await queries.list_instances_page(hot, limit=50)
    results["instances_page_first"] = summary(await timed(lambda: queries.list_instances_page(hot, limit=50), runs))
    deep_cursor = first["next_cursor"]
    for _ in range(20):  # walk 20 pages in, then time a deep page
        page = await queries.list_instances_page(hot, limit=50, cursor=deep_cursor)
        deep_cursor = page["next_cursor"] or deep_cursor
    results["instances_page_deep"] = summary(
        await timed(lambda: queries.list_instances_page(hot, limit=50, cursor=deep_cursor), runs)
    )
    results["pattern_repos_page"] = summary(
        await timed(lambda: memberships.list_pattern_repos_page(hot, limit=64), runs)
    )
    with psycopg.connect(dsn) as conn:
        repo_id = conn.execute(
            "SELECT repository_id FROM infestation_pattern_repos GROUP BY repository_id ORDER BY count(*) DESC LIMIT 1"
        ).fetchone()[0]  # type: ignore[index]
    results["repo_infestations"] = summary(
        await timed(lambda: memberships.list_repository_infestations(repo_id, limit=50), runs)
    )
    for name in ("get_hot", "instances_page_first", "instances_page_deep", "pattern_repos_page", "repo_infestations"):
        print(f"  {name}: {json.dumps(results[name])}", flush=True)


def _psycopg_params(sql: str, names: tuple[str, ...]) -> str:
    for name in names:
        sql = sql.replace(f":{name}", f"%({name})s")
    return sql


def measure_guard(dsn: str, results: dict[str, Any], runs: int) -> None:
    """The read-time guard's cost (docs/domain.md §5.7), same run, same data: the round trip (planning, execution,
    fetch; one loopback connection, no prepared statements, as the app runs them) of the ranked list (30 days, limit
    50) and of the hottest show page's three reads (get, first ledger page, 64 satellites), each with the guard and
    with its fragments replaced by TRUE, interleaved."""
    from unittest import mock

    from sqlalchemy import Select, true

    from app.infestations import memberships, queries
    from app.kernel.sql import Window, render
    from app.reports.finding_memory import pattern_key

    def composed() -> list[Select[Any]]:
        return [queries._ranked(Window(30)), queries._get(), queries._instances(), memberships._pattern_repos()]

    names = ("min_repos", "since", "limit", "key", "fetch")
    guarded = [_psycopg_params(render(q).sql, names) for q in composed()]
    # the same statements composed with every guard replaced by TRUE
    with (
        mock.patch.object(queries, "visible_scan", lambda _: true()),
        mock.patch.object(queries, "visible_occurrence", lambda _: true()),
        mock.patch.object(memberships, "visible_occurrence", lambda _: true()),
        mock.patch.object(queries, "shown_pattern", lambda *_: true()),
    ):
        bare = [_psycopg_params(render(q).sql, names) for q in composed()]

    hot = pattern_key(HOT_TITLE)
    ranked, show = guarded[0], guarded[1:]
    params = {"min_repos": 2, "since": datetime.now(UTC) - timedelta(days=30), "limit": 50, "key": hot, "fetch": 65}
    timings: dict[str, list[float]] = {k: [] for k in ("list", "list_unguarded", "show", "show_unguarded")}
    statements = {
        "list": [ranked],
        "list_unguarded": [bare[0]],
        "show": show,
        "show_unguarded": bare[1:],
    }
    with psycopg.connect(dsn) as conn:
        for run in range(runs + 5):  # 5 warm-up rounds
            for name, sqls in statements.items():
                started = time.perf_counter()
                for sql in sqls:
                    conn.execute(sql, params).fetchall()
                if run >= 5:
                    timings[name].append(time.perf_counter() - started)
    for name, values in timings.items():
        results[f"guard_{name}"] = summary(values)
        print(f"  guard {name}: {json.dumps(results[f'guard_{name}'])}", flush=True)


async def measure_refresh(results: dict[str, Any], runs: int = 5) -> None:
    """The hot key's refresh after one of its canonicals changed status, from source in full and scoped to that
    canonical's repository (docs/domain.md §5.2), interleaved; then the scoped result is checked against a full
    refresh at this scale (the projection of the key, write clocks aside)."""
    from app.infestations import projection
    from app.kernel import db
    from app.reports.finding_memory import pattern_key

    hot = pattern_key(HOT_TITLE)
    flip = text(
        "UPDATE canonical_findings SET status = CASE status WHEN 'fixed' THEN 'open' ELSE 'fixed' END, "
        "updated_at = now() WHERE id = :id"
    )
    async with db.read_session(replica=False) as session:
        picks = list(
            await session.execute(
                text(
                    "SELECT canonical_finding_id, repository_id FROM infestation_pattern_instances "
                    "WHERE pattern_key = :k ORDER BY md5(canonical_finding_id::text) LIMIT :n"
                ),
                {"k": hot, "n": 2 * runs + 3},
            )
        )
    timings: dict[str, list[float]] = {"full": [], "scoped": []}
    for n in range(runs + 1):  # run 0 warms up
        for scope in ("full", "scoped") if n % 2 else ("scoped", "full"):
            canonical_id, repository_id = picks.pop()
            async with db.transaction() as session:
                await session.execute(flip, {"id": canonical_id})
            t = time.perf_counter()
            await projection.refresh_pattern(
                hot, reason="bench", repositories=(repository_id,) if scope == "scoped" else None
            )
            if n:
                timings[scope].append(time.perf_counter() - t)
    results["refresh_hot"] = summary(timings["full"])
    results["refresh_hot_scoped"] = summary(timings["scoped"])
    results["refresh_hot_scoped_equal"] = await _scoped_equals_full(hot, picks.pop())
    print(
        f"  refresh hot key: full {json.dumps(results['refresh_hot'])}, scoped {json.dumps(results['refresh_hot_scoped'])}"
        f", equal to full: {results['refresh_hot_scoped_equal']}",
        flush=True,
    )


async def _scoped_equals_full(key: str, pick: Any) -> bool:
    from app.infestations import projection
    from app.kernel import db

    projected = {
        "infestation_pattern_instances": "canonical_finding_id",
        "infestation_pattern_repos": "repository_id",
        "infestation_pattern_status_windows": "status, window_days",
        "infestation_patterns": "pattern_key",
    }

    async def state() -> list[str]:
        async with db.read_session(replica=False) as session:
            return [
                str(
                    (
                        await session.execute(
                            text(
                                f"SELECT md5(string_agg((to_jsonb(t) - 'inserted_at' - 'updated_at' - 'refreshed_at')"
                                f"::text, ',' ORDER BY {order})) FROM {table} t WHERE pattern_key = :k"
                            ),
                            {"k": key},
                        )
                    ).scalar_one()
                )
                for table, order in projected.items()
            ]

    canonical_id, repository_id = pick
    async with db.transaction() as session:
        await session.execute(
            text("UPDATE canonical_findings SET status = 'disputed', updated_at = now() WHERE id = :id"),
            {"id": canonical_id},
        )
    await projection.refresh_pattern(key, reason="bench", repositories=(repository_id,))
    scoped = await state()
    await projection.refresh_pattern(key, reason="bench")
    return scoped == await state()


def probe_report(n: int, rng: random.Random, kind: str) -> dict[str, Any]:
    """Report n of a lag or capacity run: one finding, half on shared patterns (not the hot one), half fresh."""
    shared = rng.randrange(2, 3000)
    title = f"shared pattern {shared} injection in handler" if rng.random() < 0.5 else f"fresh finding {n} {kind}"
    finding = {"file": f"{kind}/file_{n}.py", "severity": "high", "title": title, "description": f"{kind} probe",
               "line_start": 1 + n % 1000}  # fmt: skip
    return {"commit_sha": f"{n:040x}", "model": "bench", "prompt_version": f"bench/{kind}", "run_id": f"{kind}-{n}",
            "document": {"tarakan_scan_format": 1, "findings": [finding]}}  # fmt: skip


async def poll_lag(
    dsn: str, pending: dict[int, float], lags: list[float], done: asyncio.Event, last_submit: list[float]
) -> None:
    """The lag measurement (also bench/capacity_bench.py): `pending` maps a canonical id to its commit time; it is
    reflected once its instance row carries the canonical's new updated_at. Runs until `done` and nothing pending
    (or 60 s after the last submit)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not (done.is_set() and not pending):
            if pending:
                ids = list(pending)
                rows = conn.execute(
                    "SELECT i.canonical_finding_id FROM infestation_pattern_instances i "
                    "JOIN canonical_findings c ON c.id = i.canonical_finding_id "
                    "WHERE i.canonical_finding_id = ANY(%s) AND i.updated_at = c.updated_at",
                    (ids,),
                ).fetchall()
                now = time.perf_counter()
                for (cid,) in rows:
                    lags.append(now - pending.pop(cid))
            await asyncio.sleep(0.02)
            if done.is_set() and time.perf_counter() - last_submit[0] > 60:
                break


async def measure_lag(dsn: str, results: dict[str, Any], rate: float, seconds: float) -> None:
    """Submit reports at `rate`/s through the real service while a real worker drains; lag = commit →
    the canonical's instance row carries its new updated_at."""
    from app.accounts.service import get_account_by_email

    account = await get_account_by_email("bench@example.com")
    assert account is not None
    with psycopg.connect(dsn) as conn:
        repos = conn.execute(
            "SELECT host, owner, name FROM repositories WHERE listing_status = 'listed' ORDER BY id LIMIT 2000"
        ).fetchall()
    from app.reports.service import submit_report

    pending: dict[int, float] = {}
    lags: list[float] = []
    done = asyncio.Event()
    rng = random.Random(7)
    last_submit = [time.perf_counter()]
    poller = asyncio.create_task(poll_lag(dsn, pending, lags, done, last_submit))
    interval = 1 / rate
    start = time.perf_counter()
    n = 0
    while time.perf_counter() - start < seconds:
        host, owner, name = repos[rng.randrange(len(repos))]
        body = probe_report(n, rng, "lag")
        out = await submit_report(account, host, owner, name, body)
        committed = time.perf_counter()
        last_submit[0] = committed
        with psycopg.connect(dsn) as conn:
            cid = conn.execute(
                "SELECT canonical_finding_id FROM scan_findings WHERE public_id = %s",
                (out["findings"][0]["public_id"],),
            ).fetchone()[0]  # type: ignore[index]
        pending[cid] = committed
        n += 1
        await asyncio.sleep(max(0.0, start + n * interval - time.perf_counter()))
    done.set()
    await asyncio.wait_for(poller, timeout=90)
    results["lag"] = {**summary(lags), "reports": n, "rate_per_s": n / seconds, "unreflected": len(pending)}
    print(f"  commit-to-rollup lag: {json.dumps(results['lag'])}", flush=True)


def measure_pages(base: str, hot: str, results: dict[str, Any], runs: int) -> None:
    with httpx.Client(base_url=base, timeout=30) as client:
        for name, path in (("page_index", "/infestations"), ("page_show_hot", f"/infestations/{hot}")):
            for _ in range(3):
                client.get(path)
            times, server = [], []
            size = 0
            for _ in range(runs):
                t = time.perf_counter()
                r = client.get(path)
                times.append(time.perf_counter() - t)
                assert r.status_code == 200, (path, r.status_code)
                size = len(r.content)
                server.append(float(r.headers["server-timing"].split("dur=")[1]) / 1000)
            results[name] = {**summary(times), "server": summary(server), "html_bytes": size}
            print(f"  {name}: {json.dumps(results[name])}", flush=True)


def cluster_cpu_seconds(postmaster: int) -> float:
    """CPU seconds the run's own Postgres has used so far: the postmaster, its live children and (cutime, cstime)
    every child that exited. On a machine shared with other work this is the work done, whatever the wait."""

    def stat(pid: int | str) -> list[str]:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # fields from 3 on

    ticks = sum(int(x) for x in stat(postmaster)[11:15])  # utime, stime, cutime, cstime
    for child in Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # exited: now in the postmaster's cutime
            ticks += sum(int(x) for x in stat(child)[11:13])
    return ticks / os.sysconf("SC_CLK_TCK")


async def maintain(dsn: str, results: dict[str, Any], concurrency: int, postmaster: int) -> None:
    """The set-based backfill, then the window recompute of every pattern, each timed (wall time and the CPU
    seconds Postgres spent)."""
    from app.infestations import maintenance
    from app.kernel import db

    def say(m: str) -> None:
        print("  " + m, flush=True)

    try:
        t, cpu = time.perf_counter(), cluster_cpu_seconds(postmaster)
        results["backfill_keys"] = await maintenance.backfill(progress=say, concurrency=concurrency)
        results["backfill_s"] = time.perf_counter() - t
        results["backfill_cpu_s"] = cluster_cpu_seconds(postmaster) - cpu
        results["load_during_backfill"] = os.getloadavg()[1]  # 5-minute load average of the machine
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
        t, cpu = time.perf_counter(), cluster_cpu_seconds(postmaster)
        results["recompute_patterns"] = await maintenance.recompute_all_windows(progress=say)
        results["recompute_s"] = time.perf_counter() - t
        results["recompute_cpu_s"] = cluster_cpu_seconds(postmaster) - cpu
    finally:
        await db.dispose_engines()


SIZED_TABLES = (
    "repositories",
    "scans",
    "canonical_findings",
    "scan_findings",
    "infestation_patterns",
    "infestation_pattern_repos",
    "infestation_pattern_instances",
    "infestation_pattern_status_windows",
)


def relation_sizes(conn: psycopg.Connection[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Disk size of each table (heap + TOAST) and of each of its indexes, bytes."""
    out: list[dict[str, Any]] = []
    for table in SIZED_TABLES:
        heap = conn.execute("SELECT pg_table_size(CAST(%s AS regclass))", (table,)).fetchone()[0]  # type: ignore[index]
        out.append({"table": table, "relation": "(table)", "bytes": int(heap)})
        for name, size in conn.execute(
            "SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index "
            "WHERE indrelid = CAST(%s AS regclass) ORDER BY 2 DESC",
            (table,),
        ).fetchall():
            out.append({"table": table, "relation": name, "bytes": int(size)})
    return out


@dataclass(frozen=True)
class Options:
    runs: int = 100
    lag_seconds: float = 30
    rate: float = 20
    legacy_runs: int = 3  # legacy lists take up to ~1.5 s each at Tier B: a few runs
    concurrency: int = 2  # backfill: key ranges at once (2 cores)
    guard_only: bool = False
    skip_lag: bool = False
    skip_pages: bool = False
    skip_wrk: bool = False
    snapshot: Path | None = None  # a pg_dump -Fc archive of the generated and backfilled tier (made if missing)


WRK_SECONDS = 10
WRK_CONNECTIONS = 16
WRK_PATHS = (("index", "/infestations?days=365"), ("status_open", "/infestations?days=365&status=open"))


def run_wrk(base: str, path: str, cookie: str | None = None) -> dict[str, float]:
    """`wrk -t2 -c16 -d10s`: requests/s and latency percentiles (ms). Non-2xx answers are counted."""
    command = ["wrk", "-t2", f"-c{WRK_CONNECTIONS}", f"-d{WRK_SECONDS}s", "--latency", "--timeout", "2s"]
    if cookie:
        command += ["-H", f"Cookie: {cookie}"]
    out = subprocess.run([*command, base + path], capture_output=True, text=True, check=True).stdout
    figures: dict[str, float] = {"non_2xx": 0.0, "timeouts": 0.0}
    for line in out.splitlines():
        words = line.split()
        if line.startswith("Requests/sec:"):
            figures["rps"] = float(words[1])
        elif len(words) == 2 and words[0] in ("50%", "90%", "99%"):
            figures[f"p{words[0][:-1]}_ms"] = _wrk_ms(words[1])
        elif "Non-2xx" in line:
            figures["non_2xx"] = float(words[-1])
        elif "timeout" in line:
            figures["timeouts"] = float(line.rsplit("timeout", 1)[1].split()[0])
    return figures


def _wrk_ms(value: str) -> float:
    for unit, factor in (("us", 0.001), ("ms", 1.0), ("s", 1000.0)):
        if value.endswith(unit):
            return float(value[: -len(unit)]) * factor
    return float(value)


def measure_wrk(base: str, results: dict[str, Any]) -> None:
    """The index against the status-filtered index under wrk, anonymous and with a (bogus) session cookie, which
    makes the page private and looks the session up: neither list is cached, every request runs the read."""
    for name, path in WRK_PATHS:
        for who, cookie in (("anonymous", None), ("cookie", "tarakan_session=bench-not-a-session")):
            results[f"wrk_{name}_{who}"] = run_wrk(base, path, cookie)
            print(f"  wrk {name} {who}: {json.dumps(results[f'wrk_{name}_{who}'])}", flush=True)


def run_tier(tier: Tier, options: Options) -> dict[str, Any]:
    results: dict[str, Any] = {"tier": tier.name}
    with throwaway_services(f"tarakan-bench-{tier.name}-") as services:
        procs, dsn = services.procs, services.dsn
        # SERVER_TIMING: the page timings read the server's own time from Server-Timing
        env = {**os.environ, "DATABASE_URL": services.pg.url, "REDIS_URL": services.redis.url, "SECRET_KEY": "bench",
               "REGISTRY_STATS_TTL": "30", "INFESTATIONS_READ_FROM_ROLLUP": "true",
               "SERVER_TIMING": "1"}  # fmt: skip
        os.environ.update(env)
        from app.migrate import upgrade_to_head

        snapshot = options.snapshot
        if snapshot is not None and snapshot.exists():
            t = time.perf_counter()
            restore_tier(dsn, snapshot)
            results |= json.loads(snapshot.with_suffix(".json").read_text())
            results["restore_s"] = time.perf_counter() - t
            print(f"[{tier.name}] restored {snapshot} in {results['restore_s']:.1f}s", flush=True)
        else:
            upgrade_to_head()
            t = time.perf_counter()
            results["rows"] = generate(dsn, tier)
            results["generate_s"] = time.perf_counter() - t
            assert services.pg.proc is not None
            asyncio.run(maintain(dsn, results, options.concurrency, services.pg.proc.pid))
            if snapshot is not None:
                t = time.perf_counter()
                save_tier(dsn, snapshot)
                saved = ("rows", "generate_s", "backfill_keys", "backfill_s", "recompute_patterns", "recompute_s",
                         "backfill_cpu_s", "recompute_cpu_s", "load_during_backfill")  # fmt: skip
                snapshot.with_suffix(".json").write_text(json.dumps({k: results[k] for k in saved}))
                print(f"[{tier.name}] saved {snapshot} in {time.perf_counter() - t:.1f}s", flush=True)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
            results["status_window_rows"] = int(
                conn.execute("SELECT count(*) FROM infestation_pattern_status_windows").fetchone()[0]  # type: ignore[index]
            )
            results["sizes"] = relation_sizes(conn)
        print(
            f"[{tier.name}] backfill {results['backfill_keys']} keys in {results['backfill_s']:.1f}s, "
            f"recompute-windows {results['recompute_s']:.1f}s",
            flush=True,
        )

        # the guard's cost on the same data, before the write-path measurements change it
        measure_guard(dsn, results, options.runs)
        if options.guard_only:
            return results

        async def reads() -> None:
            from app.kernel import db
            from app.kernel.queue import close_pools

            try:
                await measure_lists(dsn, results, options.runs, options.legacy_runs, legacy_sample=tier.bulk)
                await measure_reads(dsn, results, options.runs)
                await measure_refresh(results)
                if not options.skip_lag:
                    procs.append(spawn("worker", env=env, quiet=True))
                    await asyncio.sleep(2)
                    await measure_lag(dsn, results, options.rate, options.lag_seconds)
            finally:
                await close_pools()
                await db.dispose_engines()

        asyncio.run(reads())
        if options.skip_pages and options.skip_wrk:
            return results
        proc, base = start_server(env, quiet=True)
        procs.append(proc)
        from app.reports.finding_memory import pattern_key

        if not options.skip_pages:
            measure_pages(base, pattern_key(HOT_TITLE), results, options.runs)
        if not options.skip_wrk:
            measure_wrk(base, results)
    return results


def _cpu(r: dict[str, Any], name: str) -> str:
    if f"{name}_cpu_s" not in r:
        return ""
    load = f", load average {r['load_during_backfill']:.1f}" if name == "backfill" else ""
    return f" (Postgres CPU {r[f'{name}_cpu_s']:.1f} s{load})"


TARGETS = (
    "Targets at Tier B: every list filter p95 <= 1 ms database time and >= 300x faster than legacy in database "
    "time; backfill <= 60 s; hot-key refresh <= 2 s; lag p95 <= 2 s at 20 reports/s; server time p95 <= 25 ms "
    "for /infestations and <= 30 ms for the hottest show page (HTML under 200 kB); under wrk the "
    "status-filtered index within 20 % of the unfiltered one."
)


def render(all_results: list[dict[str, Any]], command: str) -> str:
    lines = [
        "## Infestations (issue 3 item 10, issue 4 item 9, issue 15 items 1-2)",
        "",
        f"Command: `{command}` (one process, loopback). Times in ms, p50 / p95.",
        "",
        TARGETS,
        "",
    ]
    for r in all_results:
        rows = r["rows"]
        lines += [
            f"### Tier {r['tier']}: {rows['repositories']:,} repositories, {rows['canonical_findings']:,} canonical "
            f"findings, {rows['scan_findings']:,} occurrences, {rows['pattern_keys']:,} pattern keys, hot pattern in "
            f"{rows['hot_repos']:,} repositories",
            "",
            f"Generation {r['generate_s']:.1f} s; backfill of {r['backfill_keys']:,} keys "
            f"{r['backfill_s']:.1f} s{_cpu(r, 'backfill')}; window recompute {r['recompute_s']:.1f} s"
            f"{_cpu(r, 'recompute')}; {r['status_window_rows']:,} status-window rows"
            + (f"; this run restored the saved tier in {r['restore_s']:.1f} s." if "restore_s" in r else "."),
            "",
            "| list (limit 50), windows 7d / 30d / 90d / 365d | rollup DB time p95 | legacy DB time p50 "
            "| legacy ÷ rollup, DB time (p50) |",
            "|---|---|---|---|",
        ]
        for status in (None, *STATUSES):  # one row a filter, its four windows in each cell
            xs = [r[f"list_{status or 'all'}_{w}d"] for w in (7, 30, 90, 365)]
            cells = [
                [f"{x['rollup_db']['p95_ms']:.2f}" for x in xs],
                [f"{x['legacy_db']['p50_ms']:.0f}" if "legacy" in x else "—" for x in xs],
                [f"{x['db_speedup_p50']:.0f}×" if "legacy" in x else "—" for x in xs],
            ]
            lines.append(f"| {status or 'all'} | " + " | ".join(" / ".join(c) for c in cells) + " |")
        lines += ["", "| operation | p50 | p95 |", "|---|---|---|"]
        for name, label in (
            ("get_hot", "get_infestation (hot key)"),
            ("instances_page_first", "list_instances_page, first page (hot key)"),
            ("instances_page_deep", "list_instances_page, page 21 (hot key)"),
            ("pattern_repos_page", "list_pattern_repos_page 64 (hot key)"),
            ("repo_infestations", "list_repository_infestations (busiest repository)"),
            ("refresh_hot", "hot key refreshed after one canonical changed, in full"),
            ("refresh_hot_scoped", "the same, scoped to its repository (the drain's case)"),
            ("lag", "commit-to-rollup lag (real worker)"),
        ):
            if name in r:
                lines.append(f"| {label} | {r[name]['p50_ms']:.1f} ms | {r[name]['p95_ms']:.1f} ms |")
        for name, label in (
            ("page_index", "GET /infestations, server time"),
            ("page_show_hot", "GET /infestations/{hot key}, server time"),
        ):
            if name in r:
                x = r[name]["server"]
                lines.append(f"| {label} | {x['p50_ms']:.1f} ms | {x['p95_ms']:.1f} ms |")
        lines.append("")
        if "lag" in r:
            lag = r["lag"]
            lines.append(
                f"Lag run: {lag['reports']} reports at {lag['rate_per_s']:.1f}/s, {lag['unreflected']} not reflected "
                "at the end."
            )
        if "refresh_hot_scoped_equal" in r:
            lines.append(
                "The hot key's scoped refresh against a full one, every projection row: "
                f"{'equal' if r['refresh_hot_scoped_equal'] else 'DIFFERENT'}."
            )
        if "page_show_hot" in r:
            lines.append(f"Show page HTML of the hot key: {r['page_show_hot']['html_bytes']:,} bytes.")
        if "wrk_index_anonymous" in r:
            lines += [
                "",
                f"wrk ({WRK_CONNECTIONS} connections, {WRK_SECONDS} s; no list is cached; the cookie rows also look "
                "the session up).",
                "",
                "| path | requests/s, anonymous / cookie | p99 ms | non-2xx + timeouts |",
                "|---|---|---|---|",
            ]
            for name, path in WRK_PATHS:
                a, c = r[f"wrk_{name}_anonymous"], r[f"wrk_{name}_cookie"]
                failed = sum(x["non_2xx"] + x["timeouts"] for x in (a, c))
                lines.append(
                    f"| `{path}` | {a['rps']:.0f} / {c['rps']:.0f} | {a['p99_ms']:.1f} / {c['p99_ms']:.1f} | "
                    f"{failed:.0f} |"
                )
        if r["tier"] == "C" and "sizes" in r:
            sizes: dict[str, list[float]] = {}  # table -> heap MB, indexes MB, index count
            for x in r["sizes"]:
                size = sizes.setdefault(x["table"], [0.0, 0.0, 0.0])
                heap = x["relation"] == "(table)"
                size[0 if heap else 1] += x["bytes"] / 2**20
                size[2] += 0 if heap else 1
            lines += ["", "| table | heap MB | indexes MB (count) |", "|---|---|---|"]
            for table, (heap_mb, index_mb, count) in sizes.items():
                lines.append(f"| {table} | {heap_mb:,.0f} | {index_mb:,.0f} ({count:.0f}) |")
        lines.append("")
    return "\n".join(lines)


def render_guard(all_results: list[dict[str, Any]], command: str) -> str:
    lines = [
        "## Read-time guard (issue 12)",
        "",
        f"Command: `{command}`. Round trip per read on one connection, with the guard and with its fragments "
        "replaced by TRUE, interleaved on the same data. Target: the guard adds at most 1 ms p95.",
        "",
        "| tier | read | with guard p50 / p95 ms | without p50 / p95 ms | added p95 ms |",
        "|---|---|---|---|---|",
    ]
    for r in all_results:
        for name, label in (("list", "ranked list, 30 days, limit 50"), ("show", "hottest show page (3 reads)")):
            g, u = r[f"guard_{name}"], r[f"guard_{name}_unguarded"]
            lines.append(
                f"| {r['tier']} | {label} | {g['p50_ms']:.2f} / {g['p95_ms']:.2f} | {u['p50_ms']:.2f} / "
                f"{u['p95_ms']:.2f} | {g['p95_ms'] - u['p95_ms']:.2f} |"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tier", choices=["T", "A", "B", "C", "both"], default="A")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--lag-seconds", type=float, default=30)
    parser.add_argument("--rate", type=float, default=20)
    parser.add_argument("--legacy-runs", type=int, default=3, help="runs of each legacy list (0: skip legacy)")
    parser.add_argument("--concurrency", type=int, default=2, help="backfill: key ranges at once")
    parser.add_argument("--skip-lag", action="store_true", help="no worker and no lag run")
    parser.add_argument("--skip-pages", action="store_true", help="no page budgets against tarakan serve")
    parser.add_argument("--skip-wrk", action="store_true", help="no wrk runs")
    parser.add_argument(
        "--snapshot",
        type=Path,
        help="pg_dump -Fc archive of the generated, backfilled tier: restored if it exists, "
        "else written after the backfill (e.g. bench/out/tier-C.dump)",
    )
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--guard", action="store_true", help="only the read-time guard's cost, with and without it")
    args = parser.parse_args()
    tiers = ["A", "B"] if args.tier == "both" else [args.tier]
    options = Options(
        runs=args.runs,
        lag_seconds=args.lag_seconds,
        rate=args.rate,
        legacy_runs=args.legacy_runs,
        concurrency=args.concurrency,
        guard_only=args.guard,
        skip_lag=args.skip_lag,
        skip_pages=args.skip_pages,
        skip_wrk=args.skip_wrk,
        snapshot=args.snapshot,
    )
    command = "python -m bench.infestations_bench " + " ".join(sys.argv[1:])
    all_results = [run_tier(TIERS[t], options) for t in tiers]
    guard_md = render_guard(all_results, command)
    print(guard_md)
    if args.guard:
        if not args.no_write:
            write_section(guard_md, "## Read-time guard")
        return 0
    md = render(all_results, command)
    print(md)
    (ROOT / "bench" / "out").mkdir(exist_ok=True)
    (ROOT / "bench" / "out" / f"infestations-{args.tier}.json").write_text(
        json.dumps(all_results, indent=2, default=str)
    )
    if not args.no_write:
        if tiers == ["C"]:  # its own section: the Tier A/B section and the guard's stay as they are
            write_section(
                md.replace(
                    "## Infestations (issue 3 item 10, issue 4 item 9, issue 15 items 1-2)",
                    "## Infestations at Tier C (issue 15 item 3)",
                    1,
                ).replace(TARGETS, "Targets: as at Tier B.", 1),
                "## Infestations at Tier C",
            )
        else:
            write_section(md, "## Infestations")  # the first such heading: Tier C's section comes after it
            write_section(guard_md, "## Read-time guard")
    return 0


if __name__ == "__main__":
    sys.exit(main())
