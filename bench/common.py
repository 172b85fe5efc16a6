"""What the benchmark scripts share: percentiles, the server time of an answer, CPU of processes, the setup steps
of a tiered run, the command line and where results go (bench/out/NAME.json and the script's own section of
docs/benchmarks.md: each script rewrites only its section). Real `tarakan` processes come from tests/harness.py and
bench/services.py, as in the tests."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg

from bench.generate import TIERS
from bench.services import Services
from tests.harness import ROOT


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(values: list[float]) -> dict[str, float]:
    """p50 / p95 in ms of times in seconds, and how many."""
    return {"p50_ms": statistics.median(values) * 1000, "p95_ms": pct(values, 0.95) * 1000, "n": len(values)}


def server_ms(response: httpx.Response) -> float:
    """The application's own time for an answer (`Server-Timing: app;dur=N`), NaN without one."""
    match = re.search(r"app;dur=([0-9.]+)", response.headers.get("server-timing", ""))
    return float(match.group(1)) if match else float("nan")


def cpu_seconds(pid: int, *, children: bool = False) -> float:
    """User + system CPU of a process and, with `children`, of its children: the live ones (uvicorn workers,
    Postgres backends) and the exited ones it reaped (cutime + cstime). 0 once the process is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return ticks / os.sysconf("SC_CLK_TCK") + (sum(cpu_seconds(int(k)) for k in kids) if children else 0.0)


def vacuum_analyze(dsn: str) -> None:
    """Fresh planner statistics after bulk SQL, as autovacuum would give a live registry."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


def timed_generate(dsn: str, tier_name: str) -> tuple[dict[str, int], float]:
    """The tier's registry generated in SQL (bench/generate.py): its row counts and the seconds it took."""
    from bench.generate import generate

    started = time.perf_counter()
    rows = generate(dsn, TIERS[tier_name])
    return rows, time.perf_counter() - started


def listed_repositories(dsn: str, count: int = 2000) -> list[tuple[str, str, str]]:
    """The first `count` listed repositories' `(host, owner, name)`, in id order."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT host, owner, name FROM repositories WHERE listing_status = 'listed' ORDER BY id LIMIT %s", (count,)
        ).fetchall()
    return [(str(h), str(o), str(n)) for h, o, n in rows]


def build_first_export() -> None:
    """The registry's daily export, built before the run: otherwise the worker builds it in its first minute, and a
    bulk export of the whole tier (minutes of worker and Postgres CPU) lands in the first figures."""
    from app.exports.service import rebuild_export
    from app.kernel import db

    async def go() -> None:
        try:
            await rebuild_export()
        finally:
            await db.dispose_engines()

    asyncio.run(go())


def prepared_tier(services: Services, tier_name: str) -> tuple[dict[str, str], dict[str, int]]:
    """The environment of a run against a live-like registry (stats cached 30 s, reads from the rollups, exports in
    the throwaway folder) and the tier's row counts: generated, backfilled, earned trust computed (else the
    worker's first trust refresh reads every canonical during the measured steps), analysed, its first export
    built."""
    env = services.use(
        REGISTRY_STATS_TTL="30",
        INFESTATIONS_READ_FROM_ROLLUP="true",
        EXPORT_DIR=str(services.pg.data_dir.parent / "exports"),
    )
    rows, _ = timed_generate(services.dsn, tier_name)
    backfill(None, concurrency=2)
    trust_recompute()
    vacuum_analyze(services.dsn)
    build_first_export()
    return env, rows


def trust_recompute() -> None:
    """Earned trust from source (`tarakan trust recompute`), as a live registry's worker keeps it."""
    from app.kernel import db
    from app.trust import refresh

    async def go() -> None:
        try:
            await refresh.recompute(holder="bench")
        finally:
            await db.dispose_engines()

    asyncio.run(go())


def backfill(progress: Callable[[str], None] | None, concurrency: int) -> int:
    """The infestation rollups backfilled (`maintenance.backfill`) in this process: how many keys."""
    from app.infestations import maintenance
    from app.kernel import db

    async def go() -> int:
        try:
            return await maintenance.backfill(progress=progress, concurrency=concurrency)
        finally:
            await db.dispose_engines()

    return asyncio.run(go())


def bench_parser(doc: str | None, *, runs: int | None = None, tiers: bool = True) -> argparse.ArgumentParser:
    """The options every benchmark takes: `--tier` (default B), `--runs` (with a default), `--no-write`."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if tiers:
        parser.add_argument("--tier", choices=sorted(TIERS), default="B")
    if runs is not None:
        parser.add_argument("--runs", type=int, default=runs)
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    return parser


def publish(
    name: str,
    results: dict[str, Any],
    render: Callable[[dict[str, Any], str], str],
    heading: str,
    args: argparse.Namespace,
    command: str | None = None,
) -> None:
    """The end of a run: raw results to bench/out/NAME.json, `render(results, command)` printed and, without
    `--no-write`, into its section. The command defaults to `python -m bench.NAME_bench` and this one's arguments."""
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    markdown = render(results, command or " ".join([f"python -m bench.{name}_bench", *sys.argv[1:]]))
    print(markdown)
    if not args.no_write:
        write_section(markdown, heading)


def write_section(markdown: str, heading: str) -> None:
    """Replace (or append) only `heading`'s section of docs/benchmarks.md; other sections stay as they are."""
    path = ROOT / "docs" / "benchmarks.md"
    text = path.read_text() if path.exists() else "# Benchmarks\n\nFigures measured on this project's machines.\n"
    start = text.find(heading + "\n")
    if start < 0:
        start = text.find(heading + " ")
    if start >= 0:
        end = text.find("\n## ", start + len(heading))
        text = text[:start] + markdown.rstrip() + "\n" + (text[end:] if end >= 0 else "")
    else:
        text = text.rstrip() + "\n\n" + markdown.rstrip() + "\n"
    path.write_text(text)
