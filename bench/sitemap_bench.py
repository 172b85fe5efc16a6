"""Sitemap streaming benchmark (issue 5 item 7). Not a test: prints figures and writes them to docs/benchmarks.md.

    .venv/bin/python -m bench.sitemap_bench --tier B --urls 1000000    # ~10 minutes on 2 cores

On a throw-away embedded Postgres + Valkey: generate the registry in SQL (bench/generate.py; Tier B is 10^5
repositories), add infestation rows for every pattern in two or more listed repositories, top the public finding
occurrences up until the sitemap holds `--urls` URLs, then against a real `tarakan serve` process:

1. single urlset: `/sitemap.xml` forced to one file (`SITEMAP_INDEX_THRESHOLD` and `SITEMAP_MAX_URLS` raised)
   streamed end to end, plain and gzip;
2. sitemap index: `/sitemap.xml` (an index at this size) then every child, as a crawler walks them;

reporting URLs/s, time to first byte and to the first <url>, and peak RSS growth of the server process
(VmHWM after the run minus VmRSS before it, with the high-water mark reset through /proc/PID/clear_refs); medians
and p95 over the runs. Every run also checks that it saw exactly the expected number of URLs. Finally the cost of
a registry_stats() cache hit against a miss (the real query), in process.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import statistics
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import httpx
import psycopg
from sqlalchemy import func, select

from app.kernel.sql import render as render_sql
from app.seo.queries import PUBLIC_PATTERN
from bench.common import bench_parser, cpu_seconds, pct, publish, timed_generate
from bench.generate import restore_tier
from bench.services import throwaway_services
from tests.harness import stop

_PUBLIC_PATTERNS_COUNT = render_sql(select(func.count()).where(PUBLIC_PATTERN)).sql

HEADING = "## Sitemap"


def heading(tier: str) -> str:
    """Tier C has its own section beside the Tier B one (Tier C is restored from a saved tier: --snapshot)."""
    return HEADING if tier != "C" else HEADING + " at Tier C (issue 15 item 3)"


TARGETS = {"urls_per_s": 100_000, "first_byte_ms": 100, "rss_growth_mb": 50}


def p50_p95(values: list[float]) -> tuple[float, float]:
    return statistics.median(values), pct(values, 0.95)


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS / VmHWM of a process, in kB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            key, value = line.split(":", 1)
            out[key] = int(value.split()[0])
    return out


def family_cpu(pid: int) -> float:
    """CPU seconds of a process and its live children (Postgres: the postmaster and its backends)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return sum(cpu_seconds(p) for p in [pid, *map(int, children)])


def reset_peak(pid: int) -> bool:
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # 5: reset the peak RSS (VmHWM) to the current RSS
        return True
    except OSError:
        return False


def stream(client: httpx.Client, url: str, *, gzip: bool) -> dict[str, Any]:
    """GET url, reading the raw body as it arrives. Times: first byte, first <url> (or <sitemap>), total."""
    headers = {"Accept-Encoding": "gzip" if gzip else "identity"}
    decoder = zlib.decompressobj(16 + zlib.MAX_WBITS) if gzip else None
    urls = 0
    raw_bytes = 0
    tails = {b"<url>": b"", b"<sitemap>": b""}
    last = b""
    first_byte = first_url = None
    started = time.perf_counter()
    with client.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200, (url, response.status_code)
        for chunk in response.iter_raw():
            now = time.perf_counter()
            if first_byte is None:
                first_byte = now - started
            raw_bytes += len(chunk)
            data = decoder.decompress(chunk) if decoder else chunk
            found = 0
            for tag, tail in tails.items():
                # a tag split across chunks is found once: a tail shorter than the tag never holds a whole one
                found += (tail + data).count(tag)
                tails[tag] = (tail + data)[-(len(tag) - 1) :]
            if found and first_url is None:
                first_url = now - started
            urls += found
            last = (last + data)[-40:]
        body_tail = (last + (decoder.flush() if decoder else b""))[-40:]
    total = time.perf_counter() - started
    assert body_tail.rstrip().endswith((b"</urlset>", b"</sitemapindex>")), body_tail
    return {"urls": urls, "bytes": raw_bytes, "total_s": total, "first_byte_s": first_byte, "first_url_s": first_url}


def expected_urls(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        repos = conn.execute("SELECT count(*) FROM repositories WHERE listing_status = 'listed'").fetchone()
        findings = conn.execute(
            "SELECT count(*) FROM scan_findings f JOIN scans s ON s.id = f.scan_id "
            "JOIN repositories r ON r.id = s.repository_id "
            "WHERE s.visibility = 'public' AND r.listing_status = 'listed'"
        ).fetchone()
        patterns = conn.execute(_PUBLIC_PATTERNS_COUNT).fetchone()
    assert repos and findings and patterns
    return {"hubs": 3, "repos": int(repos[0]), "findings": int(findings[0]), "infestations": int(patterns[0])}


def add_patterns(dsn: str) -> None:
    """Pattern rows for the infestation children (the projection itself is benchmarked elsewhere)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            """
            INSERT INTO infestation_patterns (pattern_key, title, repo_count, instance_count, first_seen_at,
                                              last_seen_at, refreshed_at, updated_at)
            SELECT c.pattern_key, min(c.title), count(DISTINCT c.repository_id), count(*), min(c.inserted_at),
                   max(c.updated_at), now(), max(c.updated_at)
            FROM canonical_findings c JOIN repositories r ON r.id = c.repository_id AND r.listing_status = 'listed'
            GROUP BY c.pattern_key
            """
        )
        # one visible instance row per pattern: the read-time guard (app/record/public.py visible_pattern) lists
        # a pattern only while one is left
        conn.execute(
            """
            INSERT INTO infestation_pattern_instances (canonical_finding_id, pattern_key, repository_id, status,
                severity, title, file_path, sample_occurrence_public_id, sample_scan_id, sample_commit_sha,
                inserted_at, updated_at)
            SELECT DISTINCT ON (c.pattern_key) c.id, c.pattern_key, c.repository_id, c.status, c.severity, c.title,
                   c.file_path, f.public_id, s.id, s.commit_sha, c.inserted_at, c.updated_at
            FROM canonical_findings c JOIN scan_findings f ON f.canonical_finding_id = c.id
            JOIN scans s ON s.id = f.scan_id AND s.visibility = 'public'
            JOIN repositories r ON r.id = s.repository_id AND r.listing_status = 'listed'
            ORDER BY c.pattern_key, c.id
            """
        )
        conn.execute("VACUUM ANALYZE")


def top_up_findings(dsn: str, target_urls: int) -> None:
    """Tier B holds about 0.36 M sitemap URLs: add public occurrences on listed repositories (linked to existing
    canonicals, so every per-row lookup is real) until the sitemap has `target_urls`."""
    missing = target_urls - sum(expected_urls(dsn).values())
    if missing <= 0:
        return
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        row = conn.execute(
            "SELECT count(*), (SELECT max(id) FROM canonical_findings) FROM scans s "
            "JOIN repositories r ON r.id = s.repository_id WHERE s.visibility = 'public' AND r.listing_status = 'listed'"
        ).fetchone()
        assert row is not None
        scans, canonicals = int(row[0]), int(row[1])
        conn.execute(
            """
            INSERT INTO scan_findings (scan_id, position, file_path, line_start, line_end, severity, title,
                                       description, canonical_finding_id, disposition)
            SELECT s.id, k, 'src/extra/f' || k || '.py', 1, 1, 'low', 'extra finding ' || k, 'bench',
                   1 + ((s.id * 7919 + k) %% %(canonicals)s), 'matches_existing'
            FROM scans s JOIN repositories r ON r.id = s.repository_id,
                 generate_series(1, %(per)s) k
            WHERE s.visibility = 'public' AND r.listing_status = 'listed'
            ORDER BY k, s.id
            LIMIT %(missing)s
            """,
            {"canonicals": canonicals, "per": -(-missing // scans), "missing": missing},
        )
        conn.execute("VACUUM ANALYZE")


def run_once(
    client: httpx.Client, server: tuple[str, int], postmaster: int, expected: int, gzip: bool
) -> dict[str, Any]:
    base, pid = server
    before = proc_status(pid)["VmRSS"]
    reset_peak(pid)
    server_cpu, pg_cpu = cpu_seconds(pid), family_cpu(postmaster)
    result = stream(client, base + "/sitemap.xml", gzip=gzip)
    result["server_cpu_s"] = cpu_seconds(pid) - server_cpu
    result["postgres_cpu_s"] = family_cpu(postmaster) - pg_cpu
    result["rss_growth_mb"] = (proc_status(pid)["VmHWM"] - before) / 1024
    assert result["urls"] == expected, (result["urls"], expected)
    return result


def run_single(
    server: tuple[str, int], baseline: tuple[str, int] | None, postmaster: int, runs: int, expected: int
) -> dict[str, Any]:
    """Plain runs (interleaved with the baseline server's when there is one: both see the same machine load),
    then gzip runs."""
    out: dict[str, Any] = {"plain": [], "gzip": [], "baseline": []}
    with httpx.Client(timeout=600) as client:
        for _ in range(runs):
            for name, srv in (("plain", server), ("baseline", baseline)):
                if srv is not None:
                    out[name].append(run_once(client, srv, postmaster, expected, gzip=False))
                    print(f"  single {name}: {out[name][-1]}", flush=True)
        for _ in range(max(1, runs // 2)):
            out["gzip"].append(run_once(client, server, postmaster, expected, gzip=True))
            print(f"  single gzip: {out['gzip'][-1]}", flush=True)
    return out


def run_index(base: str, pid: int, runs: int, expected: int) -> list[dict[str, Any]]:
    out = []
    with httpx.Client(timeout=600) as client:
        for _ in range(runs):
            before = proc_status(pid)["VmRSS"]
            reset_peak(pid)
            started = time.perf_counter()
            index = client.get(base + "/sitemap.xml", headers={"Accept-Encoding": "identity"})
            index_s = time.perf_counter() - started
            children = re.findall(r"<loc>([^<]+)</loc>", index.text)
            child_runs = [stream(client, url, gzip=False) for url in children]
            total = time.perf_counter() - started
            urls = sum(c["urls"] for c in child_runs)
            assert urls == expected, (urls, expected)
            result = {
                "children": len(children),
                "urls": urls,
                "total_s": total,
                "index_s": index_s,
                "child_first_byte_s": [c["first_byte_s"] for c in child_runs],
                "child_first_url_s": [c["first_url_s"] for c in child_runs],
                "rss_growth_mb": (proc_status(pid)["VmHWM"] - before) / 1024,
            }
            out.append(result)
            print(
                f"  index: {len(children)} children, {urls} URLs in {total:.2f}s, index {index_s * 1000:.0f} ms, "
                f"rss +{result['rss_growth_mb']:.1f} MB",
                flush=True,
            )
    return out


async def stats_costs(runs: int) -> dict[str, float]:
    from app.kernel import db
    from app.registry import stats

    try:
        misses = []
        for _ in range(runs):
            t = time.perf_counter()
            await stats.query_registry_stats()
            misses.append(time.perf_counter() - t)
        os.environ["REGISTRY_STATS_TTL"] = "60"
        await stats.registry_stats()
        n = 100_000
        t = time.perf_counter()
        for _ in range(n):
            await stats.registry_stats()
        hit = (time.perf_counter() - t) / n
        return {"miss_p50_ms": statistics.median(misses) * 1000, "miss_p95_ms": pct(misses, 0.95) * 1000,
                "hit_us": hit * 1e6}  # fmt: skip
    finally:
        await db.dispose_engines()


def run(
    tier_name: str, runs: int, target_urls: int, baseline: str | None = None, snapshot: Path | None = None
) -> dict[str, Any]:
    with throwaway_services("tarakan-sitemap-bench-") as services:
        procs, dsn = services.procs, services.dsn
        started = time.perf_counter()
        if snapshot is not None:  # a tier saved by bench.infestations_bench --snapshot, with its real rollups
            env = services.use(revision=None)
            restore_tier(dsn, snapshot)
            rows = json.loads(snapshot.with_suffix(".json").read_text())["rows"]
        else:
            env = services.use()
            rows, _ = timed_generate(dsn, tier_name)
            add_patterns(dsn)
        if target_urls:
            top_up_findings(dsn, target_urls)
            with psycopg.connect(dsn) as conn:
                counted = conn.execute("SELECT count(*) FROM scan_findings").fetchone()
                assert counted is not None
                rows["scan_findings"] = int(counted[0])
        expected = expected_urls(dsn)
        total_expected = sum(expected.values())
        print(f"[{tier_name}] generated in {time.perf_counter() - started:.0f}s; expected URLs {expected}", flush=True)
        results: dict[str, Any] = {"tier": tier_name, "rows": rows, "expected": expected, "runs": runs}
        results["stats"] = asyncio.run(stats_costs(20))
        print(f"  stats cache: {results['stats']}", flush=True)

        # registry_stats() and the per-kind URL counts that decide "one urlset" stay cached for the whole run: on a
        # shared machine a run outlasts their 30 / 60 s lifetimes, and the medians are meant to be warm requests
        # (the first run shows the cold cost)
        single_env = {**env, "SITEMAP_INDEX_THRESHOLD": str(10**9), "SITEMAP_MAX_URLS": str(10**8),
                      "REGISTRY_STATS_TTL": "3600", "SITEMAP_CACHE_TTL": "3600"}  # fmt: skip
        proc, base = services.serve(single_env)
        old: tuple[str, int] | None = None
        if baseline:  # the same server from another source tree (e.g. the commit before a change)
            old_proc, old_base = services.serve(single_env, cwd=Path(baseline))
            old = (old_base, old_proc.pid)
        assert services.pg.proc is not None
        results["single"] = run_single((base, proc.pid), old, services.pg.proc.pid, runs, total_expected)
        results["baseline"] = baseline
        for p in procs[-2:] if old else procs[-1:]:
            stop(p)

        proc, base = services.serve({**env, "SITEMAP_INDEX_THRESHOLD": "1"})  # Tier B is an index anyway; A is not
        results["index"] = run_index(base, proc.pid, runs, total_expected)
        stop(proc)
    return results


def verdict(ok: bool) -> str:
    return "meets" if ok else "**misses**"


def ratio(a: list[dict[str, Any]], b: list[dict[str, Any]], key: str) -> str:
    """`median(a) / median(b)` of a per-run figure (`rate`: URLs/s), as `1.23x`."""

    def value(x: dict[str, Any]) -> float:
        return float(x["urls"] / x["total_s"] if key == "rate" else x[key])

    return f"{statistics.median(map(value, a)) / statistics.median(map(value, b)):.2f}x"


def render(r: dict[str, Any], command: str) -> str:
    exp = r["expected"]
    total = sum(exp.values())
    lines = [
        heading(r["tier"]),
        "",
        f"Command: `{command}` (one `tarakan serve`; read the medians). Targets: >= 100,000 URLs/s, first byte "
        "<= 100 ms, peak RSS growth of the server <= 50 MB.",
        "",
        f"Registry: Tier {r['tier']}: {r['rows']['repositories']:,} repositories, {r['rows']['scan_findings']:,} finding "
        f"occurrences; sitemap URLs: {exp['repos']:,} repositories + {exp['findings']:,} findings + "
        f"{exp['infestations']:,} infestations + 3 hubs = **{total:,}** (every run saw them all).",
        "",
        "| stream | runs | URLs/s p50 (p95 low) | total s p50 | first byte ms p50 / p95 | first URL ms p50 / p95 "
        "| RSS growth MB p50 / max | body MB | CPU s p50: server / Postgres |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    rates_all: list[float] = []
    for mode in ("plain", "gzip", "baseline"):
        runs = r["single"][mode]
        if not runs:
            continue
        rates = [x["urls"] / x["total_s"] for x in runs]
        rates_all += rates if mode == "plain" else []
        fb = [x["first_byte_s"] * 1000 for x in runs]
        fu = [x["first_url_s"] * 1000 for x in runs]
        rss = [x["rss_growth_mb"] for x in runs]
        lines.append(
            f"| single urlset, {mode if mode != 'baseline' else 'plain, baseline tree'} | {len(runs)} | {statistics.median(rates):,.0f} ({pct(rates, 0.05):,.0f}) | "
            f"{statistics.median([x['total_s'] for x in runs]):.1f} | {p50_p95(fb)[0]:.1f} / {p50_p95(fb)[1]:.1f} | "
            f"{p50_p95(fu)[0]:.1f} / {p50_p95(fu)[1]:.1f} | {statistics.median(rss):.1f} / {max(rss):.1f} | "
            f"{statistics.median([x['bytes'] for x in runs]) / 1e6:.1f} | "
            f"{statistics.median([x['server_cpu_s'] for x in runs]):.2f} / "
            f"{statistics.median([x['postgres_cpu_s'] for x in runs]):.2f} |"
        )
    idx = r["index"]
    idx_rates = [x["urls"] / x["total_s"] for x in idx]
    child_fb = [v * 1000 for x in idx for v in x["child_first_byte_s"]]
    child_fu = [v * 1000 for x in idx for v in x["child_first_url_s"]]
    idx_rss = [x["rss_growth_mb"] for x in idx]
    lines.append(
        f"| index + {idx[0]['children']} children, plain | {len(idx)} | {statistics.median(idx_rates):,.0f} "
        f"({pct(idx_rates, 0.05):,.0f}) | {statistics.median([x['total_s'] for x in idx]):.1f} | "
        f"{p50_p95(child_fb)[0]:.1f} / {p50_p95(child_fb)[1]:.1f} (per child) | "
        f"{p50_p95(child_fu)[0]:.1f} / {p50_p95(child_fu)[1]:.1f} (per child) | "
        f"{statistics.median(idx_rss):.1f} / {max(idx_rss):.1f} | | |"
    )
    index_ms = [x["index_s"] * 1000 for x in idx]
    s = r["stats"]
    single_plain = r["single"]["plain"]
    lines += [
        "",
        "- The p95 first byte and the max RSS growth are the server's first request; the medians are warm.",
        f"- `/sitemap.xml` as an index: {statistics.median(index_ms):.0f} ms p50, {max(index_ms):.0f} ms max (the first "
        "request computes the child boundaries).",
        f"- `registry_stats()`: cache hit {s['hit_us']:.2f} µs; miss (the real query) {s['miss_p50_ms']:.1f} ms p50, "
        f"{s['miss_p95_ms']:.1f} ms p95.",
        *(
            [
                f"- Baseline tree `{r['baseline']}` (interleaved, same database): URLs/s p50 this ÷ baseline {ratio(single_plain, r['single']['baseline'], 'rate')}; "
                f"CPU baseline ÷ this: server {ratio(r['single']['baseline'], single_plain, 'server_cpu_s')}, Postgres "
                f"{ratio(r['single']['baseline'], single_plain, 'postgres_cpu_s')}."
            ]
            if r["single"].get("baseline")
            else []
        ),
        f"- Verdict (single urlset, plain): throughput {verdict(statistics.median(rates_all) >= TARGETS['urls_per_s'])}"
        f", first byte {verdict(p50_p95([x['first_byte_s'] * 1000 for x in single_plain])[0] <= TARGETS['first_byte_ms'])}"
        f", RSS growth {verdict(max(x['rss_growth_mb'] for x in single_plain) <= TARGETS['rss_growth_mb'])}.",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = bench_parser(__doc__, runs=5)
    parser.add_argument(
        "--urls", type=int, default=1_000_000, help="top findings up to this many URLs (0: as generated)"
    )
    parser.add_argument(
        "--baseline", metavar="DIR", help="also serve this source tree (PYTHONPATH) and interleave its plain runs"
    )
    parser.add_argument(
        "--snapshot",
        type=Path,
        metavar="DUMP",
        help="restore this tier archive (bench.infestations_bench --snapshot) instead of generating; use --urls 0",
    )
    args = parser.parse_args()
    if args.snapshot is not None and not args.snapshot.exists():
        parser.error(f"--snapshot: {args.snapshot} does not exist (bench.infestations_bench --snapshot makes it)")
    results = run(args.tier, args.runs, args.urls, args.baseline, args.snapshot)
    command = " ".join(["python -m bench.sitemap_bench", *sys.argv[1:]])
    publish("sitemap" if args.tier != "C" else "sitemap-C", results, render, heading(args.tier), args, command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
