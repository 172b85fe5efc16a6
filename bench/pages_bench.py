"""Public pages against /healthz under wrk (issue 26, Deliver 4). Not a test: prints figures and writes them to
docs/benchmarks.md.

    .venv/bin/python -m bench.pages_bench --label after            # demo and Tier B, 8 s per wrk run
    .venv/bin/python -m bench.pages_bench --baseline /tmp/base --snapshot /tmp/tier-B.dump   # and a baseline tree
    .venv/bin/python -m bench.pages_bench --tiers demo --duration 3 --no-write     # a smoke run of the script

The issue's method: one `tarakan serve` (one process) on a throw-away embedded Postgres + Valkey, `wrk -t2 -c32
-d8s` on every path of the issue's table, each page run right after a `/healthz` run so the machine's noise hits
both; share = the page's requests/s over the `/healthz` run before it. Data: `tarakan seed --demo` (the show page is
the demo's six-repository pattern), then Tier B (bench/generate.py, rollups backfilled; the show page is the
hottest pattern). With `deploy/varnish/default.vcl` in the tree and Debian's `varnishd` installed, every page runs
once more through a Varnish in front of the same server (app.devservices.Varnish; the "through Varnish" column, the
ratio to the direct run). `--baseline DIR`: another source tree (e.g. `git archive` of an older commit) served
from the same database, each of its runs right after this tree's (its own `/healthz` run first), so both trees
see the same noise. Besides requests/s, the server process's CPU per request (user + system over the run,
/proc): the figure the machine's other work disturbs least; wrk's 95th percentile comes from its Lua `done` hook.
`--misses`: every server runs without its render cache (`RENDER_CACHE_BYTES=0`: each request renders, the
miss's cost; issue 39), and the table adds the home twin and the atlas feed. `--plain`: the baseline is this tree with uvloop and httptools hidden (uvicorn then runs its pure-Python h11 on
asyncio's loop), at the demo. wrk is installed with apt-get when missing. The section shows this run's tables
only; every `--label`'s raw results accumulate in `bench/out/pages.json`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from bench.common import backfill, bench_parser, cpu_seconds, timed_generate, vacuum_analyze, write_section
from bench.generate import restore_tier, save_tier
from bench.services import Services, throwaway_services
from bench.wrk_bench import HOT_TITLE, parse_wrk, statuses
from tests.harness import ROOT, start_server, stop

HEADING = "## Public pages against /healthz (bench/pages_bench.py, issue 26)"
VCL = ROOT / "deploy" / "varnish" / "default.vcl"
DEMO_SHOW_TITLE = "Missing authorization on admin API route"  # the demo's pattern in six repositories
TARGET_HTML, TARGET_TWIN, TARGET_P99_MS, TARGET_VARNISH = 0.30, 0.40, 50.0, 5.0
# the demo's reports are public at once (no forge checks their commits: the evidence gate is for bench/capacity_bench)
SEED_ENV = {"EVIDENCE_CHECK": "off"}


def ensure_wrk() -> None:
    if shutil.which("wrk") is None:
        subprocess.run(["apt-get", "install", "-y", "-q", "wrk"], check=True, stdout=subprocess.DEVNULL)


# wrk's --latency prints 50/75/90/99 %; its Lua `done` hook gives the 95th too
P95_SCRIPT = (
    'done = function(summary, latency, requests) io.write(string.format("p95_us %d\\n", latency:percentile(95))) end\n'
)
# `--plain`: this tree again with uvicorn's defaults when neither is installed (pure-Python h11, asyncio's loop)
PLAIN_SITE = "import sys\nsys.modules['uvloop'] = None\nsys.modules['httptools'] = None\n"


def wrk(url: str, duration: float, connections: int = 32, threads: int = 2) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("w", suffix=".lua") as script:
        script.write(P95_SCRIPT)
        script.flush()
        command = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration:g}s", "--timeout", "10s", "--latency"]
        out = subprocess.run([*command, "-s", script.name, url], check=True, capture_output=True, text=True).stdout
    figures = parse_wrk(out)
    p95 = re.search(r"^p95_us (\d+)$", out, flags=re.MULTILINE)
    figures["p95_ms"] = int(p95.group(1)) / 1000 if p95 else float("nan")
    return figures


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


# `--misses`: the other pages a render-cache miss is measured on (issue 39)
MISS_PATHS = {"/index.json": "/index.json", "/infestations.atom": "/infestations.atom"}
_extra_paths: dict[str, str] = {}


def is_twin(label: str) -> bool:
    return label.endswith(".json") or label.endswith(".xml")


@contextmanager
def varnish(backend: str) -> Iterator[str | None]:
    """Debian's varnishd with our VCL in front of `backend` (app.devservices.Varnish): its base URL, or None when
    the VCL or varnishd is missing."""
    if not VCL.exists() or not (shutil.which("varnishd") or Path("/usr/sbin/varnishd").exists()):
        yield None
        return
    from app.devservices import Varnish

    work = Path(tempfile.mkdtemp(prefix="tarakan-pages-varnish-"))
    server = Varnish(work, backend.removeprefix("http://")).start()
    try:
        yield server.url
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def timed_wrk(url: str, duration: float, pid: int) -> dict[str, Any]:
    """wrk's figures, the load average before, and the server's CPU ms per request during the run."""
    load = os.getloadavg()[0]
    before = cpu_seconds(pid)
    figures = wrk(url, duration)
    used = cpu_seconds(pid) - before
    return {"load_average": load, **figures, "cpu_ms": 1000 * used / max(1, figures["requests"])}


def measure(
    tier: str, services: Services, env: dict[str, str], duration: float, baseline: Path | None, plain: bool = False
) -> dict[str, Any]:
    log = Path(services.pg.data_dir).parent / f"serve-{tier}.log"
    proc, base = start_server(env, log=log, timeout=60)
    services.procs.append(proc)
    other: tuple[subprocess.Popen[bytes], str] | None = None
    if plain:  # a sitecustomize on PYTHONPATH hides both packages from uvicorn's "auto" choice
        site = Path(services.pg.data_dir).parent / "plain-site"
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text(PLAIN_SITE)
        plain_env = {**env, "PYTHONPATH": str(site)}
        other = start_server(plain_env, log=log.with_suffix(".plain.log"), timeout=60)
        services.procs.append(other[0])
    elif baseline is not None:
        other = start_server(env, log=log.with_suffix(".baseline.log"), cwd=baseline, timeout=60)
        services.procs.append(other[0])
    runs: list[dict[str, Any]] = []
    measured = {**paths(tier, base), **_extra_paths}
    # every path warmed on every server before the first timed row, so the first row does not pay for the process's
    # first load (heap, pools, prepared statements): `/`, the first row, read higher than over interleaved runs
    for path in measured.values():
        for server in [base] + ([other[1]] if other else []):
            wrk(server + path, 1)
    with varnish(base) as cached:
        for label, path in measured.items():
            response = httpx.get(base + path, timeout=60)
            for server in [base] + ([other[1]] if other else []):
                for _ in range(3):
                    response = httpx.get(server + path, timeout=60)
                    assert response.status_code == 200, (server, path, response.status_code)
                wrk(server + path, 1)  # warm-up
            row: dict[str, Any] = {"label": label, "path": path, "bytes": len(response.content)}
            row["healthz"] = timed_wrk(base + "/healthz", duration, proc.pid)
            _, offset = statuses(log, 0)
            row["direct"] = {**timed_wrk(base + path, duration, proc.pid), "statuses": statuses(log, offset)[0]}
            if other is not None:
                row["baseline_healthz"] = timed_wrk(other[1] + "/healthz", duration, other[0].pid)
                row["baseline"] = timed_wrk(other[1] + path, duration, other[0].pid)
            if cached is not None:
                assert httpx.get(cached + path, timeout=60).status_code == 200
                row["varnish"] = wrk(cached + path, duration)
            runs.append(row)
            print(json.dumps({"tier": tier, **row}), flush=True)
    stop(proc, timeout=30)
    if other is not None:
        stop(other[0], timeout=30)
    return {"tier": tier, "runs": runs, "varnish": any("varnish" in r for r in runs), "baseline": other is not None}


def seeded_demo(services: Services) -> dict[str, str]:
    """The run's environment over the demo data (`tarakan seed --demo`, the evidence gate off)."""
    env = services.use(**SEED_ENV)
    subprocess.run([sys.executable, "-m", "app.cli", "seed", "--demo"], env={**os.environ, **env}, check=True,
                   cwd=ROOT, stdout=subprocess.DEVNULL)  # fmt: skip
    return env


def tier_data(services: Services, tier: str, snapshot: Path | None) -> dict[str, str]:
    """The run's environment over `tier`: the demo data, or a bench tier restored from `snapshot` when it exists,
    else generated and backfilled (and saved to `snapshot` when given), then analysed."""
    if tier == "demo":
        return seeded_demo(services)
    if snapshot is not None and snapshot.exists():
        env = services.use(revision=None)
        restore_tier(services.dsn, snapshot)  # migrated to head by restore_tier
    else:
        env = services.use()
        timed_generate(services.dsn, tier)
        backfill(None, concurrency=3)
        if snapshot is not None:
            save_tier(services.dsn, snapshot)
    vacuum_analyze(services.dsn)
    return env


def _share(page: dict[str, Any], healthz: dict[str, Any]) -> float:
    return float(page["requests_per_s"]) / float(healthz["requests_per_s"])


def _cpu(run: dict[str, Any]) -> str:
    return f"{run['cpu_ms']:.2f}" if "cpu_ms" in run else "–"


def render_label(label: str, result: dict[str, Any]) -> list[str]:
    baseline = f"; baseline tree `{result['baseline']}`" if result.get("baseline") else ""
    if result.get("plain"):
        baseline = "; baseline: the same tree without uvloop and httptools (h11, asyncio)"
    lines = [f"Command: `{result['command']}` at `{result['commit']}`, {result['when']} (label {label}{baseline}).", ""]
    for tier in result["tiers"]:
        runs, varnish, base = tier["runs"], tier["varnish"], tier.get("baseline", False)
        loads = [r[k]["load_average"] for r in runs for k in ("healthz", "direct")]
        head = "| path | requests/s | p99 ms | `/healthz` requests/s | share | server CPU ms: page / `/healthz` |"
        rule = "|---|---:|---:|---:|---:|---:|"
        if base:
            head += " baseline requests/s | baseline p99 ms | baseline share | baseline CPU ms: page / `/healthz` |"
            rule += "---:|---:|---:|---:|"
        if varnish:
            head += " through Varnish requests/s | × direct |"
            rule += "---:|---:|"
        lines += [
            f"**{'Demo data' if tier['tier'] == 'demo' else 'Tier ' + tier['tier']}** (load average "
            f"{min(loads):.1f}-{max(loads):.1f}, the bench's own included):",
            "",
            head + " targets |",
            rule + "---|",
        ]
        for r in runs:
            d, h = r["direct"], r["healthz"]
            share = _share(d, h)
            target = TARGET_TWIN if is_twin(r["label"]) else TARGET_HTML
            met = share >= target and d["p99_ms"] <= TARGET_P99_MS
            failures = d["socket_errors"] + d["non_2xx"]
            line = (
                f"| `{r['label']}` | {d['requests_per_s']:,.0f}"
                f"{f' ({failures} failed)' if failures else ''} | {d['p99_ms']:.1f} | "
                f"{h['requests_per_s']:,.0f} | {share:.1%} | {_cpu(d)} / {_cpu(h)} |"
            )
            if base:
                b, bh = r["baseline"], r["baseline_healthz"]
                line += (
                    f" {b['requests_per_s']:,.0f} | {b['p99_ms']:.1f} | {_share(b, bh):.1%} | {_cpu(b)} / {_cpu(bh)} |"
                )
            if varnish:
                v = r.get("varnish")
                line += (
                    f" {v['requests_per_s']:,.0f} | {v['requests_per_s'] / d['requests_per_s']:.1f} |"
                    if v
                    else " – | – |"
                )
            met = met and (
                not varnish or ("varnish" in r and r["varnish"]["requests_per_s"] >= 5 * d["requests_per_s"])
            )
            lines.append(line + (" met |" if met else " not met |"))
        if not varnish:
            lines += ["", "No Varnish column: `deploy/varnish/default.vcl` or `varnishd` was not there for this run."]
        lines.append("")
    return lines


def render(label: str, result: dict[str, Any]) -> str:
    """The section: this run's tables only (every run's raw results stay in bench/out/pages.json)."""
    lines = [
        HEADING,
        "",
        "Method: `wrk -t2 -c32 -d8s` against one `tarakan serve` process, each page right after a `/healthz` run; "
        "share = the page's requests/s over that run's. Targets: HTML ≥ 30 % of `/healthz`, twins (`.json`, "
        "`.xml`) ≥ 40 %, p99 ≤ 50 ms; through Varnish ≥ 5 × direct.",
        "",
    ]
    lines += render_label(label, result)
    return "\n".join(lines).rstrip() + "\n"


def run_stamp(script: str) -> dict[str, str]:
    """A run's command (`python -m bench.SCRIPT` and this one's arguments), the commit it measured and when (UTC),
    as its raw results and its section name them (also bench/crawl_bench.py)."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    return {
        "command": " ".join([f"python -m bench.{script}", *sys.argv[1:]]),
        "commit": commit.stdout.strip(),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def main() -> int:
    parser = bench_parser(__doc__, tiers=False)
    parser.add_argument("--tiers", default="demo,B", help="comma-separated: demo and/or bench tiers (T, A, B)")
    parser.add_argument("--duration", type=float, default=8)
    parser.add_argument("--label", default="after", help="the table this run fills (before, after, ...)")
    parser.add_argument("--baseline", type=Path, help="another source tree to measure beside this one")
    parser.add_argument(
        "--plain", action="store_true", help="as the baseline, this tree without uvloop and httptools (demo only)"
    )
    parser.add_argument(
        "--snapshot", type=Path, help="a pg_dump of the generated tier: restored if it exists, else made"
    )
    parser.add_argument("--misses", action="store_true", help="servers without the render cache: each request renders")
    args = parser.parse_args()
    ensure_wrk()
    if args.misses:
        os.environ["RENDER_CACHE_BYTES"] = "0"  # every `tarakan serve` inherits it (tests/harness.py spawn)
        _extra_paths.update(MISS_PATHS)
    baseline = args.baseline.resolve() if args.baseline else None
    tiers = []
    for name in args.tiers.split(","):
        with throwaway_services(f"tarakan-pages-{name}-") as services:
            env = tier_data(services, name, args.snapshot)
            tiers.append(measure(name, services, env, args.duration, baseline, plain=args.plain and name == "demo"))
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    store = out / "pages.json"
    results: dict[str, Any] = json.loads(store.read_text()) if store.exists() else {}
    results[args.label] = {
        **run_stamp("pages_bench"),
        "baseline": str(baseline) if baseline else None,
        "plain": args.plain,
        "tiers": tiers,
    }
    store.write_text(json.dumps(results, indent=2) + "\n")
    markdown = render(args.label, results[args.label])
    print(markdown)
    if not args.no_write:
        write_section(markdown, HEADING)
    return 0


if __name__ == "__main__":
    sys.exit(main())
