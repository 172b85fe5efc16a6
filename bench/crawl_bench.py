"""A crawler's walk against /healthz: distinct public URLs, each a render-cache miss (issue 39, Deliver 2). Not a
test: prints figures (the section it would write is `HEADING`; `--no-write` leaves docs/benchmarks.md alone).

    .venv/bin/python -m bench.crawl_bench --tiers demo --no-write          # demo data, 8 s per wrk run
    .venv/bin/python -m bench.crawl_bench --tiers demo --duration 3 --no-write   # a smoke run of the script
    .venv/bin/python -m bench.crawl_bench --tiers B --snapshot /tmp/tier-B.dump --no-write   # Tier B too

The URLs are the crawler's: every `<loc>` of the sitemap (its index's children too: show pages, repository pages,
finding pages), then the links a crawler finds on those pages that the sitemap does not list (a ledger's
`?cursor=` and `/instances` pages, a repository's next pages), each once, up to `--max-urls`. One `tarakan serve`
whose render cache keeps nothing (`RENDER_CACHE_BYTES=1`: every request is the miss path, the version read and
the kept-or-not check included, however small the tier) serves them to `wrk -t2 -c32` with a Lua script that
hands each connection the next URL of the list in turn, right after a `/healthz` run (share = the crawl's
requests/s over that run's, as bench/pages_bench.py). Besides requests/s and p99, the server's CPU per request
(/proc). `--baseline DIR`: another source tree served from the same database, each of its runs right after this
tree's. `--unix-socket`: the servers reach Postgres over its Unix socket (as the capacity bench's figure does).
Demo data as bench/pages_bench.py seeds it (the evidence gate off); a tier from bench/generate.py.
Raw results: `bench/out/crawl.json`.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import tempfile
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from bench.common import bench_parser, cpu_seconds, publish
from bench.pages_bench import P95_SCRIPT, ensure_wrk, run_stamp, tier_data, timed_wrk
from bench.services import Services, throwaway_services
from bench.wrk_bench import parse_wrk
from tests.harness import start_server, stop

HEADING = "## A crawler's walk against /healthz (bench/crawl_bench.py, issue 39)"
TARGET_SHARE = 0.08
MISS_ONLY = {"RENDER_CACHE_BYTES": "1"}  # a cache that keeps nothing: every request takes the miss path
# the public pages a crawler follows from the sitemap's; forms, the console and documents (feeds, SARIF logs,
# badges, twins) stay out
FOLLOWED = re.compile(r"^/(infestations|repos|findings|disclosures|search)(/|\?|$)")
DOCUMENT = re.compile(r"\.(sarif|atom|svg|json|xml|txt)(\?|$)")
# each connection walks the list from its own place (wrk's `setup` numbers the threads; `init` runs per thread)
WALK_SCRIPT = """
paths = {}
for line in io.lines("%s") do paths[#paths + 1] = line end
counter = 0
function setup(thread)
  thread:set("offset", counter * math.floor(#paths / 2))
  counter = counter + 1
end
function init(args) n = offset end
function request()
  n = n + 1
  return wrk.format("GET", paths[(n %% #paths) + 1])
end
"""


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs += [value for name, value in attrs if name == "href" and value]


def sitemap_paths(base: str) -> list[str]:
    """Every `<loc>` of the sitemap, through its index's children when it has one, as paths."""
    found: list[str] = []
    pending = ["/sitemap.xml"]
    while pending:
        body = httpx.get(base + pending.pop(0), timeout=120).text
        locs = [urlsplit(loc) for loc in re.findall(r"<loc>([^<]+)</loc>", body)]
        paths = [loc.path + (f"?{loc.query}" if loc.query else "") for loc in locs]
        if "<sitemapindex" in body:
            pending += paths
        else:
            found += paths
    return found


def crawl_paths(base: str, limit: int) -> tuple[list[str], Counter[str]]:
    """The sitemap's URLs, then links found on them that it does not list, each once, up to `limit`: the list and
    how many of each kind. A sitemap longer than three quarters of `limit` is sampled evenly (each kind in its
    share, as a crawler meets them), the last quarter kept for the links it does not list (cursor pages).

    The walk starts at the hubs (the atlas lists the widest patterns, the ones whose ledgers have next pages) and
    follows what it finds depth first, so a ledger's chain of `?cursor=` pages is walked as a crawler walks it; a
    listed page it finds is fetched for its links but kept only when the sample holds it (the sample is the
    sitemap's share)."""
    listed = list(dict.fromkeys(sitemap_paths(base)))
    room = max(1, limit * 3 // 4) if len(listed) > limit * 3 // 4 else limit
    paths = [listed[i * len(listed) // room] for i in range(room)] if len(listed) > room else listed
    known = set(listed)
    fetched: set[str] = set()
    kept = set(paths)
    rest = [p for p in paths if _kind(p) != "hub"]
    random.Random(0).shuffle(rest)  # links of every kind of page (in the sitemap's order, a repository's came first)
    queue = [p for p in paths if _kind(p) == "hub"] + rest
    while queue and len(paths) < limit:
        page = queue.pop(0)
        if page in fetched:
            continue
        fetched.add(page)
        response = httpx.get(base + page, timeout=60)
        if response.status_code != 200 and page not in known:  # not a page to index (`/maintain`: a login's 303)
            paths.remove(page)
            continue
        if not response.headers.get("content-type", "").startswith("text/html"):
            continue
        parser = _Links()
        parser.feed(response.text)
        found: list[str] = []
        for href in parser.hrefs:
            link = urlsplit(urljoin(base + "/", href))
            path = link.path + (f"?{link.query}" if link.query else "")
            if link.netloc != urlsplit(base).netloc or not FOLLOWED.match(path) or DOCUMENT.search(path):
                continue
            if path not in known and path not in kept:  # a page the sitemap does not list: the crawl's own
                kept.add(path)
                paths.append(path)
                found.append(path)
                if len(paths) >= limit:
                    break
            elif _kind(page) == "hub" and path.startswith("/infestations/") and path not in fetched:
                found.append(path)  # a wide pattern's show page: read for its ledger's next page
        queue[:0] = found
    return paths, Counter(_kind(p) for p in paths)


def _kind(path: str) -> str:
    parts = path.split("?")[0].split("/")
    if path.startswith("/infestations/"):
        kind = "infestation ledger" if "instances" in parts else "infestation show"
    elif path.startswith("/repos/"):
        kind = "repository"
    elif path.startswith("/findings/"):
        kind = "finding"
    else:
        kind = "hub"
    return kind + (" (cursor)" if "cursor=" in path else "")


def walk(base: str, script: Path, duration: float, pid: int, postmaster: int) -> dict[str, Any]:
    """wrk over the URL list (each connection its own place in it); the server's and Postgres's CPU ms per
    request."""
    load = os.getloadavg()[0]
    before, before_pg = cpu_seconds(pid), cpu_seconds(postmaster, children=True)
    command = ["wrk", "-t2", "-c32", f"-d{duration:g}s", "--timeout", "10s", "--latency", "-s", str(script), base]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    used, used_pg = cpu_seconds(pid) - before, cpu_seconds(postmaster, children=True) - before_pg
    figures = parse_wrk(out)
    requests = max(1, figures["requests"])
    return {
        "load_average": load,
        **figures,
        "cpu_ms": 1000 * used / requests,
        "postgres_cpu_ms": 1000 * used_pg / requests,
    }


def measure(tier: str, services: Services, env: dict[str, str], args: Any) -> dict[str, Any]:
    work = Path(services.pg.data_dir).parent
    servers = [start_server({**env, **MISS_ONLY}, log=work / f"serve-{tier}.log", timeout=60)]
    if args.baseline is not None:
        log = work / f"serve-{tier}.baseline.log"
        servers.append(start_server({**env, **MISS_ONLY}, log=log, cwd=args.baseline, timeout=60))
    services.procs += [proc for proc, _ in servers]
    base = servers[0][1]
    found, _ = crawl_paths(base, args.max_urls)
    # a link that answers anything but a 200 to an anonymous visitor (a maintainer's page redirects to the login)
    # is not a page a crawler indexes; every URL kept answers 200 on both trees before anything is timed
    statuses = {path: httpx.get(base + path, timeout=60).status_code for path in found}
    paths = [path for path in found if statuses[path] == 200]
    dropped = Counter(f"{_kind(path)} {status}" for path, status in statuses.items() if status != 200)
    if dropped:
        print(f"[{tier}] not 200, left out: {dict(dropped)}", flush=True)
    kinds = Counter(_kind(path) for path in paths)
    for path in paths:
        for _, server in servers[1:]:
            response = httpx.get(server + path, timeout=60)
            assert response.status_code == 200, (server, path, response.status_code)
    listing = work / f"crawl-{tier}.txt"
    listing.write_text("\n".join(paths) + "\n")
    rows = []
    assert services.pg.proc is not None
    postmaster = services.pg.proc.pid
    with tempfile.NamedTemporaryFile("w", suffix=".lua") as script:
        script.write(WALK_SCRIPT % listing + P95_SCRIPT)
        script.flush()
        for round_ in range(args.rounds):
            for name, (proc, server) in zip(("this tree", "baseline"), servers, strict=False):
                walk(server, Path(script.name), 1, proc.pid, postmaster)  # warm-up
                row = {
                    "round": round_ + 1,
                    "tree": name,
                    "healthz": timed_wrk(server + "/healthz", args.duration, proc.pid),
                    "crawl": walk(server, Path(script.name), args.duration, proc.pid, postmaster),
                }
                rows.append(row)
                print(json.dumps({"tier": tier, **row}), flush=True)
    for proc, _ in servers:
        stop(proc, timeout=30)
    return {"tier": tier, "urls": len(paths), "kinds": dict(kinds), "dropped": dict(dropped), "runs": rows}


def render(result: dict[str, Any]) -> str:
    lines = [
        HEADING,
        "",
        f"Command: `{result['command']}` at `{result['commit']}`, {result['when']}. Method: bench/crawl_bench.py's "
        f"docstring; target: the crawl ≥ {TARGET_SHARE:.0%} of `/healthz`.",
        "",
    ]
    for tier in result["tiers"]:
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(tier["kinds"].items()))
        lines += [
            f"**{'Demo data' if tier['tier'] == 'demo' else 'Tier ' + tier['tier']}**: {tier['urls']} URLs ({kinds})"
            + (f"; found but not 200, left out: {tier['dropped']}." if tier.get("dropped") else "."),
            "",
            "| round | tree | crawl pages/s | p99 ms | `/healthz` requests/s | share | server CPU ms: page / `/healthz` |"
            " Postgres CPU ms a page | load | target |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for row in tier["runs"]:
            c, h = row["crawl"], row["healthz"]
            share = c["requests_per_s"] / h["requests_per_s"]
            failed = c["socket_errors"] + c["non_2xx"]
            lines.append(
                f"| {row['round']} | {row['tree']} | {c['requests_per_s']:,.0f}"
                f"{f' ({failed} failed)' if failed else ''} | {c['p99_ms']:.1f} | {h['requests_per_s']:,.0f} | "
                f"{share:.1%} | {c['cpu_ms']:.2f} / {h['cpu_ms']:.2f} | {c.get('postgres_cpu_ms', 0):.2f} | "
                f"{c['load_average']:.1f} | "
                f"{'met' if share >= TARGET_SHARE else 'not met'} |"
            )
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    parser = bench_parser(__doc__, tiers=False)
    parser.add_argument("--tiers", default="demo", help="comma-separated: demo and/or bench tiers (T, A, B)")
    parser.add_argument("--duration", type=float, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-urls", type=int, default=20_000)
    parser.add_argument("--baseline", type=Path, help="another source tree to measure beside this one")
    parser.add_argument("--snapshot", type=Path, help="a pg_dump of the generated tier: restored if it exists")
    parser.add_argument(
        "--unix-socket", action="store_true", help="the servers reach Postgres over its Unix socket, not TCP"
    )
    args = parser.parse_args()
    args.baseline = args.baseline.resolve() if args.baseline else None
    ensure_wrk()
    tiers = []
    for name in args.tiers.split(","):
        with throwaway_services(f"tarakan-crawl-{name}-") as services:
            env = tier_data(services, name, args.snapshot)
            if args.unix_socket:  # a Postgres on the same host: no loopback TCP stack per statement, on either side
                env = {**env, "DATABASE_URL": services.pg.socket_url}
            tiers.append(measure(name, services, env, args))
    result = {**run_stamp("crawl_bench"), "tiers": tiers}
    publish("crawl", result, lambda r, _command: render(r), HEADING, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
