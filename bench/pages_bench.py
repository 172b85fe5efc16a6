"""Public pages against /healthz under wrk (issue 26, Deliver 4). Not a test: prints figures and writes them to
docs/benchmarks.md.

    .venv/bin/python -m bench.pages_bench --label after            # demo and Tier B, 8 s per wrk run
    .venv/bin/python -m bench.pages_bench --tiers demo --duration 3 --no-write     # a smoke run of the script

The issue's method: one `tarakan serve` (one process) on a throw-away embedded Postgres + Valkey, `wrk -t2 -c32
-d8s` on every path of the issue's table, each page run right after a `/healthz` run so the machine's noise hits
both; share = the page's requests/s over the `/healthz` run before it. Data: `tarakan seed --demo` (the show page is
the demo's six-repository pattern), then Tier B (bench/generate.py, rollups backfilled; the show page is the
hottest pattern). With `deploy/varnish/default.vcl` in the tree and Debian's `varnishd` installed, every page runs
a third time through a Varnish in front of the same server (the "through Varnish" column, the ratio to the direct
run). wrk is installed with apt-get when missing. Each `--label` (before/after) keeps its own table; raw results
accumulate in `bench/out/pages.json`.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from app.devservices import free_port
from bench.common import backfill, bench_parser, timed_generate, vacuum_analyze, write_section
from bench.services import Services, throwaway_services
from bench.wrk_bench import HOT_TITLE, parse_wrk, statuses
from tests.harness import ROOT, start_server, stop

HEADING = "## Public pages against /healthz (bench/pages_bench.py, issue 26)"
VCL = ROOT / "deploy" / "varnish" / "default.vcl"
DEMO_SHOW_TITLE = "Missing authorization on admin API route"  # the demo's pattern in six repositories
TARGET_HTML, TARGET_TWIN, TARGET_P99_MS, TARGET_VARNISH = 0.30, 0.40, 50.0, 5.0


def ensure_wrk() -> None:
    if shutil.which("wrk") is None:
        subprocess.run(["apt-get", "install", "-y", "-q", "wrk"], check=True, stdout=subprocess.DEVNULL)


def wrk(url: str, duration: float, connections: int = 32, threads: int = 2) -> dict[str, Any]:
    command = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration:g}s", "--timeout", "10s", "--latency", url]
    return parse_wrk(subprocess.run(command, check=True, capture_output=True, text=True).stdout)


def paths(tier: str, base: str) -> dict[str, str]:
    """The issue's table: label -> path."""
    from app.reports.finding_memory import pattern_key

    key = pattern_key(DEMO_SHOW_TITLE if tier == "demo" else HOT_TITLE)
    return {
        "/": "/",
        "/infestations": "/infestations",
        "/infestations.json": "/infestations.json",
        "/infestations?days=365&status=open": "/infestations?days=365&status=open",
        "/infestations/{key}": f"/infestations/{key}",
        "/infestations/{key}.json": f"/infestations/{key}.json",
        "/sitemap.xml": "/sitemap.xml",
    }


def is_twin(label: str) -> bool:
    return label.endswith(".json") or label.endswith(".xml")


@contextmanager
def varnish(backend: str) -> Iterator[str | None]:
    """Debian's varnishd with our VCL in front of `backend` (its BACKEND_HOST/BACKEND_PORT filled in): its base
    URL, or None when the VCL or varnishd is missing."""
    varnishd = shutil.which("varnishd") or ("/usr/sbin/varnishd" if Path("/usr/sbin/varnishd").exists() else None)
    if not VCL.exists() or varnishd is None:
        yield None
        return
    host, port = backend.removeprefix("http://").rsplit(":", 1)
    work = Path(tempfile.mkdtemp(prefix="tarakan-pages-varnish-"))
    vcl = work / "default.vcl"
    vcl.write_text(VCL.read_text().replace("BACKEND_HOST", host).replace("BACKEND_PORT", port))
    listen = free_port()
    proc = subprocess.Popen(
        [varnishd, "-F", "-f", str(vcl), "-a", f"127.0.0.1:{listen}", "-n", str(work / "n"), "-s", "malloc,256m",
         "-T", "none"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{listen}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", listen), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("varnishd did not start") from None
                time.sleep(0.1)
        yield base
    finally:
        stop(proc)
        shutil.rmtree(work, ignore_errors=True)


def measure(tier: str, services: Services, env: dict[str, str], duration: float) -> dict[str, Any]:
    log = Path(services.pg.data_dir).parent / f"serve-{tier}.log"
    proc, base = start_server(env, log=log, timeout=60)
    services.procs.append(proc)
    runs: list[dict[str, Any]] = []
    with varnish(base) as cached:
        for label, path in paths(tier, base).items():
            for _ in range(3):
                response = httpx.get(base + path, timeout=60)
                assert response.status_code == 200, (path, response.status_code)
            size = len(response.content)
            wrk(base + path, 2)  # warm-up
            healthz = {"load_average": os.getloadavg()[0], **wrk(base + "/healthz", duration)}
            _, offset = statuses(log, 0)
            page = {"load_average": os.getloadavg()[0], **wrk(base + path, duration)}
            page["statuses"] = statuses(log, offset)[0]
            row: dict[str, Any] = {"label": label, "path": path, "bytes": size, "healthz": healthz, "direct": page}
            if cached is not None:
                assert httpx.get(cached + path, timeout=60).status_code == 200
                row["varnish"] = wrk(cached + path, duration)
            runs.append(row)
            print(json.dumps({"tier": tier, **row}), flush=True)
    stop(proc, timeout=30)
    return {"tier": tier, "runs": runs, "varnish": any("varnish" in r for r in runs)}


def run_demo(duration: float) -> dict[str, Any]:
    with throwaway_services("tarakan-pages-demo-") as services:
        env = services.use()
        subprocess.run([sys.executable, "-m", "app.cli", "seed", "--demo"], env={**os.environ, **env}, check=True,
                       cwd=ROOT, stdout=subprocess.DEVNULL)  # fmt: skip
        return measure("demo", services, env, duration)


def run_tier(name: str, duration: float) -> dict[str, Any]:
    with throwaway_services(f"tarakan-pages-{name}-") as services:
        env = services.use()
        rows, _ = timed_generate(services.dsn, name)
        backfill(None, concurrency=3)
        vacuum_analyze(services.dsn)
        return {**measure(name, services, env, duration), "rows": rows}


def _share(page: dict[str, Any], healthz: dict[str, Any]) -> float:
    return float(page["requests_per_s"]) / float(healthz["requests_per_s"])


def render_label(label: str, result: dict[str, Any]) -> list[str]:
    lines = [
        f"### {label} (`{result['commit']}`, {result['when']})",
        "",
        f"Command: `{result['command']}`.",
        "",
    ]
    for tier in result["tiers"]:
        varnish = tier["varnish"]
        loads = [r["healthz"]["load_average"] for r in tier["runs"]] + [
            r["direct"]["load_average"] for r in tier["runs"]
        ]
        lines += [
            f"**{'Demo data' if tier['tier'] == 'demo' else 'Tier ' + tier['tier']}** (1-minute load average "
            f"{min(loads):.1f}-{max(loads):.1f} during the runs on 2 cores shared with other work):",
            "",
            "| path | bytes | requests/s | p50 / p99 ms | `/healthz` requests/s | share of `/healthz` | target |"
            + (" through Varnish requests/s | × direct |" if varnish else ""),
            "|---|---:|---:|---:|---:|---:|---|" + ("---:|---:|" if varnish else ""),
        ]
        for r in tier["runs"]:
            d, h = r["direct"], r["healthz"]
            share = _share(d, h)
            target = TARGET_TWIN if is_twin(r["label"]) else TARGET_HTML
            met = share >= target and d["p99_ms"] <= TARGET_P99_MS
            failures = d["socket_errors"] + d["non_2xx"]
            line = (
                f"| `{r['label']}` | {r['bytes']:,} | {d['requests_per_s']:,.0f}"
                f"{f' ({failures} failed)' if failures else ''} | {d['p50_ms']:.1f} / {d['p99_ms']:.1f} | "
                f"{h['requests_per_s']:,.0f} | {share:.1%} | ≥ {target:.0%}, p99 ≤ 50: {'met' if met else 'not met'} |"
            )
            if varnish:
                v = r.get("varnish")
                line += (
                    f" {v['requests_per_s']:,.0f} | {v['requests_per_s'] / d['requests_per_s']:.1f} |"
                    if v
                    else " – | – |"
                )
            lines.append(line)
        if not varnish:
            lines += ["", "No Varnish column: `deploy/varnish/default.vcl` or `varnishd` was not there for this run."]
        lines.append("")
    return lines


def render(results: dict[str, Any]) -> str:
    lines = [
        HEADING,
        "",
        "The issue's method: `wrk -t2 -c32 -d8s` against one `tarakan serve` (one process, `LOG_FORMAT=text` access "
        "lines to a file), each page right after a `/healthz` run; share = page over that `/healthz` run. Targets: "
        "HTML ≥ 30 % of `/healthz`, twins (`.json`, `.xml`) ≥ 40 %, p99 ≤ 50 ms; through Varnish ≥ 5 × direct. "
        "wrk, the server and Postgres share the machine's 2 cores, which other sessions use at the same time: the "
        "load average is given with each table.",
        "",
    ]
    for label in ("before", "after", *sorted(set(results) - {"before", "after"})):
        if label in results:
            lines += render_label(label, results[label])
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    parser = bench_parser(__doc__, tiers=False)
    parser.add_argument("--tiers", default="demo,B", help="comma-separated: demo and/or bench tiers (T, A, B)")
    parser.add_argument("--duration", type=float, default=8)
    parser.add_argument("--label", default="after", help="the table this run fills (before, after, ...)")
    args = parser.parse_args()
    ensure_wrk()
    tiers = []
    for name in args.tiers.split(","):
        tiers.append(run_demo(args.duration) if name == "demo" else run_tier(name, args.duration))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    store = out / "pages.json"
    results: dict[str, Any] = json.loads(store.read_text()) if store.exists() else {}
    results[args.label] = {
        "command": " ".join(["python -m bench.pages_bench", *sys.argv[1:]]),
        "commit": commit.stdout.strip(),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "tiers": tiers,
    }
    store.write_text(json.dumps(results, indent=2) + "\n")
    markdown = render(results)
    print(markdown)
    if not args.no_write:
        write_section(markdown, HEADING)
    return 0


if __name__ == "__main__":
    sys.exit(main())
