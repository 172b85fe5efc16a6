"""Bulk export at a tier (issue 14 item 8): time, bytes and peak RSS of a real `tarakan export` process.

On a throw-away embedded Postgres + Valkey: generate the registry in SQL (bench/generate.py; Tier B is 10^5
repositories, about 10^6 finding occurrences), add pattern rows (as the sitemap benchmark does), announce what is
public on the change feed (`changes.sync_all`: the export reads its opaque ids and position), then run
`tarakan export --out DIR` `--runs` times as a separate process. Each run reports its wall time, the files' records
and bytes, and the process's peak resident set (`/usr/bin/time`'s maximum resident set size of the process:
interpreter, imports and the streamed export). The export is checked: the manifest's records equal the public rows
counted in SQL, and its checksums match the files.

    .venv/bin/python -m bench.export_bench --tier B [--runs 3] [--no-write]
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.common import bench_parser, publish, timed_generate, vacuum_analyze
from bench.services import throwaway_services
from bench.sitemap_bench import add_patterns
from tests.harness import ROOT

HEADING = "## Bulk export (issue 14 item 8)"


def announce() -> float:
    """Announce what is public on the change feed (`changes.sync_all`, the whole diff migration 0005 seeds with):
    bench data bypasses the services that write the feed, and the export reads the repositories' opaque ids and
    the feed's position from it."""
    from app.kernel import db
    from app.record import changes

    async def sync() -> None:
        async with db.transaction() as session:
            await changes.sync_all(session)
        await db.dispose_engines()

    started = time.perf_counter()
    asyncio.run(sync())
    return time.perf_counter() - started


def public_counts(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:

        def one(sql: str) -> int:
            row = conn.execute(sql).fetchone()
            assert row is not None
            return int(row[0])

        return {
            "repositories.ndjson.gz": one("SELECT count(*) FROM repositories WHERE listing_status = 'listed'"),
            "findings.ndjson.gz": one(
                "SELECT count(*) FROM scan_findings f JOIN scans s ON s.id = f.scan_id "
                "JOIN repositories r ON r.id = s.repository_id "
                "WHERE s.visibility = 'public' AND r.listing_status = 'listed' AND f.canonical_finding_id IS NOT NULL"
            ),
        }


def _peak_rss_mb(stderr: str) -> float:
    """The `maxrss_kb=N` line /usr/bin/time adds: the peak resident set of the command itself (time forks it while
    small and it execs, so the figure is not inflated by this script's own memory, as `wait4` on a child forked
    from here would be)."""
    line = next(x for x in reversed(stderr.splitlines()) if x.startswith("maxrss_kb="))
    return int(line.removeprefix("maxrss_kb=")) / 1024


def export_once(env: dict[str, str], out: Path) -> dict[str, Any]:
    started = time.perf_counter()
    done = subprocess.run(
        ["/usr/bin/time", "-f", "maxrss_kb=%M", sys.executable, "-m", "app.cli", "export", "--out", str(out)],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - started
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    for entry in manifest["files"]:
        path = out / entry["name"]
        with path.open("rb") as handle:
            sha256 = hashlib.file_digest(handle, "sha256").hexdigest()
        assert sha256 == entry["sha256"] and path.stat().st_size == entry["bytes"], entry
    return {
        "seconds": elapsed,
        "peak_rss_mb": _peak_rss_mb(done.stderr),
        "files": manifest["files"],
        "stdout": done.stdout,
    }


def baseline_rss(env: dict[str, str]) -> float:
    """Peak RSS of a CLI process that loads the export's code and exits: what the export itself adds is above it."""
    code = "import app.cli, app.exports.service; app.cli.build_parser()"
    done = subprocess.run(
        ["/usr/bin/time", "-f", "maxrss_kb=%M", sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return _peak_rss_mb(done.stderr)


def run(tier_name: str, runs: int) -> dict[str, Any]:
    with throwaway_services("tarakan-export-bench-") as services:
        env = services.use()
        started = time.perf_counter()
        rows, _ = timed_generate(services.dsn, tier_name)
        add_patterns(services.dsn)
        generated = time.perf_counter() - started
        feed_seconds = announce()
        vacuum_analyze(services.dsn)
        expected = public_counts(services.dsn)
        print(
            f"[{tier_name}] generated in {generated:.0f}s, feed announced in {feed_seconds:.0f}s; {expected}",
            flush=True,
        )
        results: dict[str, Any] = {
            "tier": tier_name,
            "rows": rows,
            "generate_s": generated,
            "feed_s": feed_seconds,
            "baseline_rss_mb": baseline_rss(env),
            "expected": expected,
            "runs": [],
        }
        scratch = Path(tempfile.mkdtemp(prefix="tarakan-export-bench-out-"))
        try:
            for n in range(runs):
                out = scratch / f"run{n}"
                result = export_once(env, out)
                records = {f["name"]: f["records"] for f in result["files"]}
                for name, count in expected.items():
                    assert records[name] == count, (name, records[name], count)
                print(f"  run {n + 1}: {result['seconds']:.1f}s, peak RSS {result['peak_rss_mb']:.0f} MB", flush=True)
                results["runs"].append(result)
                shutil.rmtree(out)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return results


def render(r: dict[str, Any], command: str) -> str:
    runs = r["runs"]
    seconds = [x["seconds"] for x in runs]
    rss = [x["peak_rss_mb"] for x in runs]
    files = runs[0]["files"]
    total_bytes = sum(f["bytes"] for f in files)
    lines = [
        HEADING,
        "",
        f"Command: `{command}` (a real `tarakan export --out DIR` process per run).",
        "",
        f"Registry: Tier {r['tier']}: {r['rows']['repositories']:,} repositories, {r['rows']['scan_findings']:,} "
        f"finding occurrences (generated in {r['generate_s']:.0f} s). Record counts and checksums checked in "
        "every run.",
        "",
        "| file | records | bytes (gzip) |",
        "|---|---|---|",
        *(f"| `{f['name']}` | {f['records']:,} | {f['bytes'] / 1e6:,.1f} MB |" for f in files),
        f"| total | | {total_bytes / 1e6:,.1f} MB |",
        "",
        "| runs | wall time p50 (max) | peak RSS of the process p50 (max) |",
        "|---|---|---|",
        f"| {len(runs)} | {statistics.median(seconds):.1f} s ({max(seconds):.1f} s) | "
        f"{statistics.median(rss):.0f} MB ({max(rss):.0f} MB) |",
        "",
        f"- Peak RSS is the whole CLI process, imports included (they alone take {r['baseline_rss_mb']:.0f} MB): rows "
        "stream from a server-side cursor, so it does not grow with the registry. The worker builds the same "
        'export (its takedown window: docs/operations.md "Bulk export").',
    ]
    return "\n".join(lines)


def main() -> int:
    args = bench_parser(__doc__, runs=3).parse_args()
    publish("export", run(args.tier, args.runs), render, HEADING, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
