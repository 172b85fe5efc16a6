"""Cost of the worker's continuous shadow-compare (app.infestations.shadow_sampler). Not a test: prints figures and
writes them to docs/benchmarks.md ("## Continuous shadow-compare").

    .venv/bin/python -m bench.shadow_bench --tier A      # ~3-5 min on 2 cores (generation and backfill)

On a throw-away embedded Postgres + Valkey: generate the tier in SQL (bench/generate.py), backfill the rollups
through the real `backfill`, then time in the same run: one healthy run of the job's work (`run_once`) at the
default sample size and at others, and the comparison of the hot key alone (its legacy aggregate scans every one of
its public canonicals: the most a single sampled key can cost).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

import psycopg

from bench.common import write_section
from bench.generate import TIERS, Tier, generate
from bench.infestations_bench import HOT_TITLE, summary, timed
from bench.services import throwaway_services
from tests.harness import ROOT

SAMPLES = (10, 50, 200)


def run_tier(tier: Tier, runs: int) -> dict[str, Any]:
    results: dict[str, Any] = {"tier": tier.name}
    with throwaway_services(f"tarakan-bench-shadow-{tier.name}-") as services:
        os.environ.update({"DATABASE_URL": services.pg.url, "REDIS_URL": services.redis.url, "SECRET_KEY": "bench"})
        from app.migrate import upgrade_to_head

        upgrade_to_head()
        results["rows"] = generate(services.dsn, tier)

        async def measure() -> None:
            from app.infestations import maintenance, shadow_sampler
            from app.kernel import db
            from app.reports.finding_memory import pattern_key

            try:
                t = time.perf_counter()
                results["backfill_keys"] = await maintenance.backfill(progress=None, concurrency=3)
                results["backfill_s"] = time.perf_counter() - t
                with psycopg.connect(services.dsn, autocommit=True) as conn:
                    conn.execute("VACUUM ANALYZE")
                for size in SAMPLES:
                    outcomes: list[shadow_sampler.ShadowRun] = []

                    async def once(size: int = size, outcomes: list[shadow_sampler.ShadowRun] = outcomes) -> None:
                        outcomes.append(await shadow_sampler.run_once(sample_size=size, recheck_seconds=0))

                    results[f"run_{size}"] = summary(await timed(once, runs))
                    results[f"run_{size}"]["keys_compared_mean"] = sum(o.compared for o in outcomes) / len(outcomes)
                    results[f"run_{size}"]["suspects"] = sum(len(o.suspects) for o in outcomes)
                    print(f"  run_once sample={size}: {json.dumps(results[f'run_{size}'])}", flush=True)
                hot = pattern_key(HOT_TITLE)
                results["hot_key"] = summary(await timed(lambda: shadow_sampler.compare_keys([hot]), runs))
                print(f"  hot key alone: {json.dumps(results['hot_key'])}", flush=True)
            finally:
                await db.dispose_engines()

        asyncio.run(measure())
    return results


def render(r: dict[str, Any], command: str) -> str:
    rows = r["rows"]
    lines = [
        "## Continuous shadow-compare",
        "",
        f"Command: `{command}`. Wall time of one run of the worker's job (`shadow_sampler.run_once`) on healthy",
        "rollups, p50 / p95.",
        "",
        f"Tier {r['tier']}: {rows.get('repositories', 0):,} repositories, {rows.get('canonical_findings', 0):,} "
        f"canonical findings, {r['backfill_keys']:,} pattern keys (backfill {r['backfill_s']:.0f} s).",
        "",
        "| sample (keys) | keys compared (mean) | p50 ms | p95 ms | suspects |",
        "|---|---|---|---|---|",
    ]
    for size in SAMPLES:
        s = r[f"run_{size}"]
        lines.append(
            f"| {size} | {s['keys_compared_mean']:.1f} | {s['p50_ms']:.1f} | {s['p95_ms']:.1f} | {s['suspects']} |"
        )
    hot = r["hot_key"]
    lines += [
        "",
        f"The hot key alone: {hot['p50_ms']:.1f} / {hot['p95_ms']:.1f} ms.",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tier", choices=["T", "A", "B"], default="A")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    results = run_tier(TIERS[args.tier], args.runs)
    md = render(results, "python -m bench.shadow_bench " + " ".join(sys.argv[1:]))
    print(md)
    (ROOT / "bench" / "out").mkdir(exist_ok=True)
    (ROOT / "bench" / "out" / "shadow.json").write_text(json.dumps(results, indent=2, default=str))
    if not args.no_write:
        write_section(md, "## Continuous shadow-compare")
    return 0


if __name__ == "__main__":
    sys.exit(main())
