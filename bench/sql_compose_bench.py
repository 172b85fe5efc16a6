"""SQL composition on the public read path (issue 23, docs/architecture.md "Composing SQL").

Two measurements, same database, same run:

1. The atlas list and show reads end to end (`list_infestations_rollup`, status-filtered too, `get_infestation`,
   ledger pages, satellites) in this tree and in a baseline tree (`--baseline DIR`, e.g. the commit before the Core
   composition checked out with `git worktree add /tmp/sql-base <commit>`), each in its own worker process,
   rounds interleaved.
2. What SQLAlchemy does per execution before sending a statement (`_compile_w_cache`, the step every `execute`
   takes, with the engine's compiled-statement cache on), for the ranked list: the baseline's `text()` built per
   call, this tree's statement compiled once at import, the same Core `Select` executed as Core (built once, and
   rebuilt per call), and a compilation without the cache (what a miss costs).

    .venv/bin/python -m bench.sql_compose_bench --tier A --baseline /tmp/sql-base [--runs 300] [--rounds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HOT_TITLE = "shared pattern 1 injection in handler"  # the hottest pattern of bench/generate.py
READS = ("list_30d", "list_open_30d", "get", "ledger_first", "ledger_next", "satellites")
WARMUP = 20


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _summary(values: list[float], scale: float) -> dict[str, float]:
    return {"p50": statistics.median(values) * scale, "p95": _pct(values, 0.95) * scale, "n": len(values)}


# ---- the worker: runs in the tree under test (PYTHONPATH), imports nothing from bench/ ---------------------------


async def _reads(runs: int) -> dict[str, list[float]]:
    import hashlib

    from app.infestations import memberships, queries
    from app.kernel import db

    hot = hashlib.sha256(HOT_TITLE.encode()).hexdigest()
    try:
        first = await queries.list_instances_page(hot, limit=50)
        cursor = first["next_cursor"]
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "list_30d": lambda: queries.list_infestations_rollup(days=30, min_repos=2, limit=40),
            "list_open_30d": lambda: queries.list_infestations_rollup(days=30, status="open", limit=40),
            "get": lambda: queries.get_infestation(hot),
            "ledger_first": lambda: queries.list_instances_page(hot, limit=50),
            "ledger_next": lambda: queries.list_instances_page(hot, limit=50, cursor=cursor),
            "satellites": lambda: memberships.list_pattern_repos_page(hot, limit=64),
        }
        timings: dict[str, list[float]] = {name: [] for name in READS}
        for n in range(runs + WARMUP):
            for name in READS:
                started = time.perf_counter()
                await calls[name]()
                if n >= WARMUP:
                    timings[name].append(time.perf_counter() - started)
        return timings
    finally:
        await db.dispose_engines()


def _compile_steps(runs: int) -> dict[str, dict[str, Any]]:
    """Per-execution statement preparation of the ranked list (30 days), as `Connection.execute` does it."""
    from sqlalchemy import text
    from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
    from sqlalchemy.util import LRUCache

    from app.infestations import queries

    dialect = PGDialect_psycopg()  # type: ignore[no-untyped-call]
    variants: dict[str, Any] = {}
    if hasattr(queries, "_RANKED"):  # this tree: composed with Core, compiled once at import
        from app.kernel.sql import Window

        built = queries._ranked(Window(30))
        variants["compiled at import (text)"] = lambda: queries._RANKED[30]
        variants["Core Select, built once"] = lambda: built
        variants["Core Select, rebuilt per call"] = lambda: queries._ranked(Window(30))
    else:  # the baseline: `text(ranked_list_sql(window))` at every call
        variants["text() per call (baseline)"] = lambda: text(queries.ranked_list_sql(30))
    cache: LRUCache[Any, Any] = LRUCache(500)
    out: dict[str, dict[str, Any]] = {}
    for name, make in variants.items():
        seconds: list[float] = []
        hits: dict[str, int] = {}
        for n in range(runs + WARMUP):
            started = time.perf_counter()
            statement = make()
            *_, stats = statement._compile_w_cache(
                dialect, compiled_cache=cache, column_keys=[], for_executemany=False, schema_translate_map=None
            )
            elapsed = time.perf_counter() - started
            if n >= WARMUP:
                seconds.append(elapsed)
                hits[stats.name] = hits.get(stats.name, 0) + 1
        out[name] = {**_summary(seconds, 1e6), "cache": hits}
    built = make()
    seconds = []
    for _ in range(max(20, runs // 10)):
        started = time.perf_counter()
        built.compile(dialect=dialect)
        seconds.append(time.perf_counter() - started)
    out["no cache (a miss)"] = {**_summary(seconds, 1e6), "cache": {"none": len(seconds)}}
    return out


def _statements() -> dict[str, str]:
    """The SQL text each read sends (ranked and status lists for 30 days, the show page's three reads)."""
    from app.infestations import queries

    if hasattr(queries, "_RANKED"):
        from app.infestations import memberships

        return {
            "list_30d": queries._RANKED[30].text,
            "list_open_30d": queries._STATUS_RANKED[30].text,
            "get": queries._GET.text,
            "ledger_first": queries._INSTANCES[False].text,
            "ledger_next": queries._INSTANCES[True].text,
            "satellites": memberships._REPOS[False].text,
        }
    baseline: Any = queries  # the tree before issue 23: module-level SQL strings with `{after}` slots
    after = "(i.updated_at, i.canonical_finding_id) < (:cursor_at, :cursor_id)"
    return {
        "list_30d": baseline.ranked_list_sql(30),
        "list_open_30d": baseline.status_list_sql(30),
        "get": baseline._GET_SQL,
        "ledger_first": baseline._INSTANCES_SQL.format(after="TRUE"),
        "ledger_next": baseline._INSTANCES_SQL.format(after=after),
        "satellites": baseline._REPOS_SQL.format(after="TRUE"),
    }


def _shape(node: dict[str, Any]) -> list[Any]:
    """A plan without its costs and estimates: node types, indexes, relations, subplans, in order."""
    keys = ("Node Type", "Index Name", "Relation Name", "Alias", "Subplan Name", "Parent Relationship")
    return [[node.get(k) for k in keys], [_shape(child) for child in node.get("Plans", [])]]


def _plans_and_round_trips(runs: int) -> dict[str, Any]:
    """Each read's statement sent by psycopg alone (no SQLAlchemy): its plan shape, and its round trip."""
    import hashlib
    import re
    from datetime import UTC, datetime, timedelta

    import psycopg

    hot = hashlib.sha256(HOT_TITLE.encode()).hexdigest()
    since = datetime.now(UTC) - timedelta(days=30)
    params = {"min_repos": 2, "since": since, "limit": 40, "status": "open", "key": hot, "fetch": 51}
    params |= {"cursor_at": datetime.now(UTC) - timedelta(days=3), "cursor_id": 2**40}
    dsn = os.environ["DATABASE_URL"].replace("postgresql+psycopg://", "postgresql://")
    out: dict[str, Any] = {}
    with psycopg.connect(dsn, prepare_threshold=None) as conn:
        for name, sql in _statements().items():
            query = re.sub(r"(?<![:\w]):(\w+)", r"%(\1)s", sql)
            plan = conn.execute("EXPLAIN (FORMAT JSON) " + query, params).fetchone()[0]  # type: ignore[index]
            seconds = []
            for n in range(runs + WARMUP):
                started = time.perf_counter()
                conn.execute(query, params).fetchall()
                if n >= WARMUP:
                    seconds.append(time.perf_counter() - started)
            out[name] = {"plan": _shape(plan[0]["Plan"]), **_summary(seconds, 1e3)}
    return out


def worker(runs: int) -> None:
    import app

    result = {
        "tree": str(Path(app.__file__).resolve().parents[1]),
        "reads": asyncio.run(_reads(runs)),
        "compile": _compile_steps(runs),
        "sql": _plans_and_round_trips(runs),
    }
    print(json.dumps(result))


# ---- the parent: data, rounds, figures --------------------------------------------------------------------------


def _run_worker(tree: Path, env: dict[str, str], runs: int) -> dict[str, Any]:
    worker_env = {**os.environ, **env, "PYTHONPATH": str(tree), "INFESTATIONS_READ_FROM_ROLLUP": "true"}
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--worker", "--runs", str(runs)],
        cwd=tree,
        env=worker_env,
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise RuntimeError(f"the worker in {tree} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(result["tree"]) == tree.resolve(), f"the worker imported {result['tree']}, not {tree}"
    return result


def run(args: argparse.Namespace) -> dict[str, Any]:
    from bench.common import backfill, timed_generate, vacuum_analyze
    from bench.services import throwaway_services

    trees = {"this tree": ROOT, **({"baseline": Path(args.baseline)} if args.baseline else {})}
    results: dict[str, Any] = {"tier": args.tier, "runs": args.runs, "rounds": args.rounds, "trees": {}}
    for name, tree in trees.items():
        commit = subprocess.run(
            ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        )
        results["trees"][name] = {"commit": commit.stdout.strip() or "?"}
    with throwaway_services(f"tarakan-bench-sqlcompose-{args.tier}-") as services:
        env = services.use()
        results["rows"], _ = timed_generate(services.dsn, args.tier)
        results["keys"] = backfill(None, 3)
        vacuum_analyze(services.dsn)
        reads: dict[str, dict[str, list[float]]] = {name: {r: [] for r in READS} for name in trees}
        for round_ in range(args.rounds):
            order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
            for name in order:
                outcome = _run_worker(trees[name], env, args.runs)
                for r in READS:
                    reads[name][r] += outcome["reads"][r]
                results["trees"].setdefault(name, {})["compile"] = outcome["compile"]
                results["trees"][name].setdefault("sql", []).append(outcome["sql"])
                print(f"  round {round_ + 1}: {name} done", flush=True)
        for name in trees:
            results["trees"][name]["path"] = str(trees[name])
            results["trees"][name]["reads"] = {r: _summary(reads[name][r], 1e3) for r in READS}
            rounds = results["trees"][name].pop("sql")
            results["trees"][name]["sql"] = {
                r: {
                    "plan": rounds[-1][r]["plan"],
                    "p50": statistics.median(x[r]["p50"] for x in rounds),
                    "p95": statistics.median(x[r]["p95"] for x in rounds),
                }
                for r in READS
            }
        if args.baseline:
            this, base = results["trees"]["this tree"]["sql"], results["trees"]["baseline"]["sql"]
            results["same_plans"] = {r: this[r]["plan"] == base[r]["plan"] for r in READS}
    return results


def render(r: dict[str, Any], command: str) -> str:
    trees = r["trees"]
    names = list(trees)
    lines = [
        "## SQL composition (bench/sql_compose_bench.py, issue 23)",
        "",
        f"Command: `{command}`.",
        f"Tier {r['tier']}: {r['rows'].get('repositories', 0):,} repositories, {r['keys']:,} pattern keys; each",
        f"tree in its own process, {r['rounds']} interleaved rounds; ms per call, p50 / p95.",
        "",
        "Trees: " + ", ".join(f"{n} at `{trees[n].get('commit', '?')}`" for n in names) + ".",
        "",
        "| read | " + " | ".join(names) + (" | same plan as the baseline |" if "same_plans" in r else " |"),
        "|---|" + "---|" * (len(names) + ("same_plans" in r)),
    ]
    for read in READS:  # the plan: node types, indexes, relations, subplans; costs aside
        cells = [f"{trees[n]['reads'][read]['p50']:.2f} / {trees[n]['reads'][read]['p95']:.2f}" for n in names]
        same = [("yes" if r["same_plans"][read] else "**no**")] if "same_plans" in r else []
        lines.append(f"| {read} | " + " | ".join([*cells, *same]) + " |")
    lines += [
        "",
        "Preparing the ranked list's statement per execution (SQLAlchemy's `_compile_w_cache`), µs p50 / p95:",
        "",
        "| tree | statement | p50 / p95 µs | cache |",
        "|---|---|---|---|",
    ]
    for name in names:
        for variant, s in trees[name]["compile"].items():
            cache = ", ".join(f"{k} {v}" for k, v in s["cache"].items())
            lines.append(f"| {name} | {variant} | {s['p50']:.1f} / {s['p95']:.1f} | {cache} |")
    lines += [
        "",
        "How to read it: a statement compiled once at import is a cache hit keyed by its text, cheaper than the",
        "baseline's `text()` built at every call; a Core `Select` rebuilt per request costs about a compilation even",
        "when the cache hits, which is why no request builds one.",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tier", choices=["T", "A", "B"], default="A")
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--baseline", help="a source tree to compare with (e.g. a git worktree of an older commit)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args()
    if args.worker:
        worker(args.runs)
        return 0
    sys.path.insert(0, str(ROOT))
    from bench.common import publish

    results = run(args)
    publish("sql_compose", results, render, "## SQL composition", args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
