"""The render cache on and off, same data, same run (issue 26, Deliver 2). Not a test: prints figures.

    .venv/bin/python -m bench.render_cache_bench                    # demo data, 3 rounds of 4 s per page and server
    .venv/bin/python -m bench.render_cache_bench --duration 2 --rounds 1   # a smoke run

Two `tarakan serve` processes on one throw-away embedded Postgres + Valkey with `tarakan seed --demo`: one with the
render cache (`RENDER_CACHE_BYTES` default), one without (`RENDER_CACHE_BYTES=0`). For every page, `wrk -t2 -c32`
runs against the server without the cache, then with it, `--rounds` times (only one server is loaded at a time, so
the machine's noise hits both alike); the table gives the medians of requests/s and p99 over the rounds and the
ratio of the medians."""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import httpx

from bench.common import bench_parser
from bench.pages_bench import ensure_wrk, paths, seeded_demo, wrk
from bench.services import throwaway_services
from tests.harness import start_server, stop


def pages() -> dict[str, str]:
    """pages_bench's table on the demo tier, with the health check and the atlas feed."""
    return {"/healthz": "/healthz", **paths("demo", ""), "/infestations.atom": "/infestations.atom"}


def main() -> int:
    parser = bench_parser(__doc__, tiers=False)
    parser.add_argument("--duration", type=float, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ensure_wrk()
    rows: list[dict[str, Any]] = []
    with throwaway_services("tarakan-render-cache-") as services:
        env = seeded_demo(services)
        logs = Path(services.pg.data_dir).parent
        off, off_base = start_server({**env, "RENDER_CACHE_BYTES": "0"}, log=logs / "serve-off.log", timeout=60)
        services.procs.append(off)
        on, on_base = start_server({**env}, log=logs / "serve-on.log", timeout=60)
        services.procs.append(on)
        for label, path in pages().items():
            for base in (off_base, on_base):
                for _ in range(3):
                    assert httpx.get(base + path, timeout=60).status_code == 200, (base, path)
                wrk(base + path, 1)  # warm-up
            runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
            for _ in range(args.rounds):
                runs["off"].append(wrk(off_base + path, args.duration))
                runs["on"].append(wrk(on_base + path, args.duration))
            row: dict[str, Any] = {"label": label, "load_average": os.getloadavg()[0], **runs}
            rows.append(row)
            print(json.dumps(row), flush=True)
        stop(on, timeout=30)
        stop(off, timeout=30)

    def median(runs: list[dict[str, Any]], field: str) -> float:
        return statistics.median(float(r[field]) for r in runs)

    print()
    print("| path | without: requests/s (p99 ms) | with: requests/s (p99 ms) | × |")
    print("|---|---:|---:|---:|")
    for row in rows:
        off_rps, on_rps = median(row["off"], "requests_per_s"), median(row["on"], "requests_per_s")
        print(
            f"| `{row['label']}` | {off_rps:,.0f} ({median(row['off'], 'p99_ms'):.0f}) | "
            f"{on_rps:,.0f} ({median(row['on'], 'p99_ms'):.0f}) | {on_rps / off_rps:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
