"""Cached pages while reports arrive (issue 39, Deliver 3: versions scoped to what a page shows). Not a test: prints
figures (docs/benchmarks.md is left alone; raw results go to bench/out/versions.json).

    .venv/bin/python -m bench.versions_bench --baseline /tmp/versions-base     # 2 rounds of 4 s per page and tree
    .venv/bin/python -m bench.versions_bench --duration 2 --rounds 1           # a smoke run, this tree only

On a throw-away embedded Postgres + Valkey with `tarakan seed --demo`: one `tarakan serve` of this tree (and, with
`--baseline DIR`, one of that tree, e.g. `git archive` of an older commit, on the same database), both with the
render cache on, and one `tarakan worker` (the drain that refreshes the rollups the reports queue). For every page,
`--rounds` times and interleaved (each tree's quiet run, then each tree's loaded run, so the machine's noise hits
both alike): `wrk -t2 -c32` quiet, then again while a loop posts `--rate` reports/s (bench/capacity_bench.py's
reports, bearer tokens of admin accounts, the evidence gate off) to the same server (`--post-to apart`: to a third
server of this tree, so the page server's own CPU is the pages' alone). The table: each page's median requests/s
and the page server's CPU ms per request, quiet and loaded, the loaded share of the quiet rate, and the renders/s
during the loaded run (the server's `tarakan_render_cache_requests_total{outcome="miss"}`). "by CPU": quiet CPU per
request over loaded, the share of the quiet rate the page server's own work would allow (the machine's other load,
Postgres, the worker and the client included in requests/s, is not).
`--table FILE`: print the table of a saved run (bench/out/versions.json) and stop."""

from __future__ import annotations

import asyncio
import json
import os
import re
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import msgspec
import uvloop

from bench.capacity_bench import Client, capacity_report, make_submitters
from bench.common import bench_parser, cpu_seconds, listed_repositories
from bench.pages_bench import ensure_wrk, paths, seeded_demo, wrk
from bench.services import throwaway_services
from tests.harness import ROOT, spawn, start_server

OUT = ROOT / "bench" / "out" / "versions.json"
ACCOUNTS = 8


def pages(dsn: str) -> dict[str, str]:
    """pages_bench's demo table, the atlas feed, and the badge of the repository the demo's show page names first."""
    host, owner, name = listed_repositories(dsn, 1)[0]
    return {**paths("demo", ""), "/infestations.atom": "/infestations.atom",
            "/repos/{repo}/badge.svg": f"/repos/{host}/{owner}/{name}/badge.svg"}  # fmt: skip


class Poster:
    """Posts `rate` reports/s to one server from a thread of its own (an event loop apart from the caller's), open
    loop, round-robin over the listed repositories and the tokens, until `stop()`; counts the answers."""

    def __init__(self, base: str, tokens: list[str], repos: list[tuple[str, str, str]], rate: float, seq: list[int]):
        self.base, self.tokens, self.repos, self.rate, self.seq = base, tokens, repos, rate, seq
        self.statuses: dict[str, int] = {}
        self.stopping = threading.Event()
        self.started = time.perf_counter()
        self.thread = threading.Thread(target=lambda: uvloop.run(self._run()), daemon=True)
        self.thread.start()

    async def _run(self) -> None:
        client = Client(64)
        in_flight: set[asyncio.Task[None]] = set()

        async def post(n: int) -> None:
            host, owner, name = self.repos[n % len(self.repos)]
            body = msgspec.json.encode(capacity_report(n))
            try:
                code, _ = await client.post(self.base, f"/api/v1/repos/{host}/{owner}/{name}/reports", body,
                                            self.tokens[n % len(self.tokens)])  # fmt: skip
                status = str(code)
            except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as exc:
                status = type(exc).__name__
            self.statuses[status] = self.statuses.get(status, 0) + 1

        k = 0
        while not self.stopping.is_set():
            await asyncio.sleep(max(0.0, self.started + k / self.rate - time.perf_counter()))
            k += 1
            self.seq[0] += 1
            task = asyncio.create_task(post(self.seq[0]))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        if in_flight:
            await asyncio.wait(in_flight)
        client.close()

    def stop(self) -> dict[str, Any]:
        self.stopping.set()
        self.thread.join(timeout=60)
        seconds = time.perf_counter() - self.started
        ok = self.statuses.get("201", 0) + self.statuses.get("200", 0)
        return {"achieved_per_s": ok / seconds, "statuses": self.statuses}


def misses(base: str) -> float:
    """The server's render cache misses so far (each one a render)."""
    text = httpx.get(base + "/metrics", timeout=30).text
    found = re.search(r'^tarakan_render_cache_requests_total\{outcome="miss"\} ([0-9.e+]+)$', text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def measured(base: str, pid: int, path: str, duration: float) -> dict[str, Any]:
    """wrk's figures, the renders/s and the page server's CPU ms per request during the run (steadier than requests/s
    on a shared machine)."""
    before, cpu = misses(base), cpu_seconds(pid)
    figures = wrk(base + path, duration)
    figures["cpu_ms"] = 1000 * (cpu_seconds(pid) - cpu) / max(1, figures["requests"])
    figures["renders_per_s"] = (misses(base) - before) / duration
    return figures


def main() -> int:
    parser = bench_parser(__doc__, tiers=False)
    parser.add_argument("--duration", type=float, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rate", type=float, default=35)
    parser.add_argument("--baseline", type=Path, help="another source tree, served from the same database")
    parser.add_argument("--pages", nargs="*", help="only these labels of the table")
    parser.add_argument("--table", type=Path, help="print the table of a saved run and stop")
    parser.add_argument(
        "--post-to",
        choices=("same", "apart"),
        default="same",
        help="post the reports to the server under test (same) or to a server of this tree of their own (apart)",
    )
    args = parser.parse_args()
    if args.table is not None:
        saved = json.loads(args.table.read_text())
        print_table(saved["rows"], saved["rate"], saved["post_to"])
        return 0
    ensure_wrk()
    rows: list[dict[str, Any]] = []
    with throwaway_services("tarakan-versions-") as services:
        env = seeded_demo(services)
        tokens = make_submitters(services.dsn, ACCOUNTS)
        repos = listed_repositories(services.dsn)
        logs = Path(services.pg.data_dir).parent
        trees = {"after": ROOT, **({"before": args.baseline} if args.baseline else {})}
        bases: dict[str, str] = {}
        pids: dict[str, int] = {}
        for label, tree in trees.items():
            proc, bases[label] = start_server(env, log=logs / f"serve-{label}.log", cwd=tree, timeout=60)
            services.procs.append(proc)
            pids[label] = proc.pid
        ingest: str | None = None
        if args.post_to == "apart":
            proc, ingest = start_server(env, log=logs / "serve-ingest.log", timeout=60)
            services.procs.append(proc)
        services.procs.append(spawn("worker", env=env, quiet=True))
        seq = [0]
        table = {k: v for k, v in pages(services.dsn).items() if not args.pages or k in args.pages}
        for label, path in table.items():
            for base in bases.values():
                for _ in range(3):
                    assert httpx.get(base + path, timeout=60).status_code == 200, (base, path)
                wrk(base + path, 1)  # warm-up
            runs: dict[str, dict[str, list[dict[str, Any]]]] = {t: {"quiet": [], "loaded": []} for t in bases}
            for _ in range(args.rounds):
                for tree, base in bases.items():
                    runs[tree]["quiet"].append(measured(base, pids[tree], path, args.duration))
                for tree, base in bases.items():
                    poster = Poster(ingest or base, tokens, repos, args.rate, seq)
                    time.sleep(1)  # the drain under way
                    figures = measured(base, pids[tree], path, args.duration)
                    figures["posted"] = poster.stop()
                    runs[tree]["loaded"].append(figures)
                    time.sleep(2)  # the drain done before the next quiet run
            row: dict[str, Any] = {"label": label, "load_average": os.getloadavg()[0], "runs": runs}
            rows.append(row)
            print(json.dumps(row), flush=True)
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps({"rate": args.rate, "post_to": args.post_to, "rows": rows}, indent=1))
    print_table(rows, args.rate, args.post_to)
    return 0


def print_table(rows: list[dict[str, Any]], rate: float, post_to: str) -> None:
    def median(runs: list[dict[str, Any]], field: str) -> float:
        return statistics.median(float(r[field]) for r in runs)

    print()
    where = "the server under test" if post_to == "same" else "a server of their own"
    print(f"reports posted at {rate:g}/s to {where}; medians over the rounds")
    print("| path | tree | quiet req/s (CPU ms/req) | loaded req/s (CPU ms/req) | loaded / quiet | by CPU |"
          " renders/s loaded | reports/s |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        for tree, of_tree in row["runs"].items():
            quiet, loaded = median(of_tree["quiet"], "requests_per_s"), median(of_tree["loaded"], "requests_per_s")
            posted = statistics.median(r["posted"]["achieved_per_s"] for r in of_tree["loaded"])
            renders = median(of_tree["loaded"], "renders_per_s")
            quiet_cpu, loaded_cpu = median(of_tree["quiet"], "cpu_ms"), median(of_tree["loaded"], "cpu_ms")
            print(f"| `{row['label']}` | {tree} | {quiet:,.0f} ({quiet_cpu:.2f}) | {loaded:,.0f} ({loaded_cpu:.2f}) | "
                  f"{loaded / quiet:.0%} | {quiet_cpu / loaded_cpu:.0%} | {renders:.1f} | {posted:.1f} |")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
