"""Many processes under wrk (issue 15 item 5). Not a test: prints figures and writes them to docs/benchmarks.md.

    .venv/bin/python -m bench.wrk_bench --tier B      # generation and backfill, then 2 x 4 wrk runs
    .venv/bin/python -m bench.wrk_bench --tier T --duration 3 --no-write      # a smoke run of the script

Generates the tier in SQL (bench/generate.py) on a throw-away embedded Postgres + Valkey, backfills the rollups,
then, for `tarakan serve --workers 1` and then `--workers 2` (uvicorn processes on one port), runs wrk with
`--connections` connections (default 64) against the atlas index (`/infestations`), the hottest pattern's show page,
the sitemap index (`/sitemap.xml`) and its first child sitemap (for twice as long: 50,000 URLs each), and records
requests/s, p50/p99 latency, errors and non-2xx answers. wrk, the servers and Postgres share this machine's cores:
the figures are the capacity of the whole box, not of the web tier alone. Raw results: `bench/out/wrk.json`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from bench.common import backfill, bench_parser, publish, timed_generate, vacuum_analyze
from bench.generate import TIERS
from bench.services import throwaway_services
from tests.harness import start_server, stop

HEADING = "## Many processes under wrk"
HOT_TITLE = "shared pattern 1 injection in handler"  # the hottest pattern of bench/generate.py
_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


def _found(pattern: str, text: str) -> re.Match[str]:
    match = re.search(pattern, text)
    if match is None:
        raise ValueError(f"unexpected wrk output (no {pattern!r}):\n{text}")
    return match


def _ms(value: str) -> float:
    number, unit = _found(r"^([\d.]+)(us|ms|s|m)$", value.strip()).groups()
    return float(number) * _UNITS[unit]


def parse_wrk(output: str) -> dict[str, Any]:
    """requests/s, latency percentiles (ms) and failures from `wrk --latency` output."""
    # wrk pads a value in seconds with a trailing space ("1.20s ")
    percentiles = {
        f"p{p}_ms": _ms(v) for p, v in re.findall(r"^\s+(50|75|90|99)%\s+(\S+)\s*$", output, flags=re.MULTILINE)
    }
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    requests = re.search(r"(\d+) requests in", output)
    return {
        "requests_per_s": float(_found(r"Requests/sec:\s+([\d.]+)", output).group(1)),
        "requests": int(requests.group(1)) if requests else 0,
        **percentiles,
        "socket_errors": sum(int(n) for n in errors.groups()) if errors else 0,
        "non_2xx": int(non_2xx.group(1)) if non_2xx else 0,
    }


def wrk(url: str, connections: int, duration: float, threads: int) -> dict[str, Any]:
    command = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration:g}s", "--timeout", "60s", "--latency", url]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return {**parse_wrk(output), "wrk_output": output}


def first_child_sitemap(base: str) -> str:
    """The first full child of the sitemap index (the hubs child is small)."""
    index = httpx.get(f"{base}/sitemap.xml", timeout=60).text
    if "<sitemapindex" not in index:
        return "/sitemap.xml"
    children = [c for c in re.findall(r"<loc>([^<]+)</loc>", index) if not c.endswith("/hubs.xml")]
    assert children, index[:300]
    return str(children[0]).removeprefix(base)


def statuses(log: Path, offset: int) -> tuple[dict[str, int], int]:
    """HTTP statuses of the server's access lines written after `offset`, and the new offset."""
    with open(log, "rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
        end = f.tell()
    return dict(Counter(re.findall(r"tarakan\.access: \S+ \S+ (\d{3}) ", text))), end


def run(tier_name: str, connections: int, duration: float, threads: int) -> dict[str, Any]:
    tier = TIERS[tier_name]
    results: dict[str, Any] = {"tier": tier.name, "connections": connections, "duration_s": duration, "runs": []}
    with throwaway_services(f"tarakan-wrk-{tier.name}-") as services:
        env = services.use()
        results["rows"], _ = timed_generate(services.dsn, tier_name)
        started = time.perf_counter()
        results["backfill_keys"] = backfill(lambda m: print("  " + m, flush=True), concurrency=3)
        print(f"[{tier.name}] backfill {results['backfill_keys']} keys in {time.perf_counter() - started:.0f}s")
        vacuum_analyze(services.dsn)
        from app.reports.finding_memory import pattern_key

        for processes in (1, 2):
            log = Path(services.pg.data_dir).parent / f"serve-{processes}.log"
            proc, base = start_server(env, args=("--workers", str(processes)), log=log, timeout=60)
            try:
                paths = {
                    "index": "/infestations",
                    "show (hottest)": f"/infestations/{pattern_key(HOT_TITLE)}",
                    "sitemap index": "/sitemap.xml",
                    "child sitemap": first_child_sitemap(base),
                }
                for name, path in paths.items():
                    for _ in range(3):  # warm every process's caches and pools a little
                        assert httpx.get(base + path, timeout=60).status_code == 200, path
                    wrk(base + path, connections, 2, threads)  # warm-up
                    _, offset = statuses(log, 0)
                    figures = {
                        "processes": processes,
                        "page": name,
                        "path": path,
                        "load_average_before": os.getloadavg()[0],  # the machine is shared: what else ran
                        # a child sitemap is 50,000 URLs: 64 at once take seconds each, so it runs longer
                        **wrk(base + path, connections, duration * 2 if name == "child sitemap" else duration, threads),
                    }
                    figures["statuses"] = statuses(log, offset)[0]  # which answers wrk counted as non-2xx
                    results["runs"].append(figures)
                    print(json.dumps({k: v for k, v in figures.items() if k != "wrk_output"}), flush=True)
            finally:
                stop(proc, timeout=30)
    return results


def failed(run: dict[str, Any]) -> str:
    """wrk's failures, with the statuses the server logged that were not 2xx (a 503 is load shedding)."""
    shed = ", ".join(f"{n} × {code}" for code, n in sorted(run["statuses"].items()) if not code.startswith("2"))
    count = int(run["socket_errors"] + run["non_2xx"])
    return f"{count} ({shed})" if shed else str(count)


def render(results: dict[str, Any], command: str) -> str:
    rows = results["rows"]
    by = {(r["page"], r["processes"]): r for r in results["runs"]}
    lines = [
        HEADING,
        "",
        f"Command: `{command}` (Tier {results['tier']}: {rows['canonical_findings']:,} canonical findings). wrk with {results['connections']} connections for "
        f"{results['duration_s']:g} s per page (the child sitemap twice as long), against `tarakan serve --workers "
        "1` and `--workers 2`. wrk, the servers and Postgres share the 2 cores: the figures are the whole box's.",
        "",
        "| page | processes | requests/s | p50 / p99 ms | failed (server statuses) | load average before |",
        "|---|---:|---:|---:|---|---:|",
    ]
    for page in dict.fromkeys(r["page"] for r in results["runs"]):
        for processes in (1, 2):
            r = by[(page, processes)]
            lines.append(
                f"| {page} (`{r['path'][:48]}`) | {processes} | {r['requests_per_s']:,.1f} | "
                f"{r['p50_ms']:,.0f} / {r['p99_ms']:,.0f} | {failed(r)} | {r['load_average_before']:.1f} |"
            )
    lines += [
        "",
        "A failure is an answer wrk did not count as 2xx/3xx, or a socket error; a 503 is load shedding "
        "(docs/reliability.md).",
    ]
    cores, quietest = os.cpu_count() or 1, min(r["load_average_before"] for r in results["runs"])
    if quietest > 2 * cores:
        lines += [
            "",
            f"**The load average was at least {quietest:.1f} on {cores} cores before every run**: these figures "
            "measure the contention with the other work on the machine, not what a second server process buys; "
            "rerun the command on a quiet machine for that.",
        ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--duration", type=float, default=15)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("wrk is not installed (Debian: apt-get install wrk)", file=sys.stderr)
        return 1
    publish("wrk", run(args.tier, args.connections, args.duration, args.threads), render, HEADING, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
