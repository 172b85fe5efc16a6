"""SARIF ingestion at a tier (issue 14 item 8): a 200-result SARIF 2.1.0 log (the per-report limit) posted to a real
`tarakan serve` as `application/sarif+json`, server time (`Server-Timing: app;dur`) and round trip, p50 / p95.

On a throw-away embedded Postgres + Valkey: generate the registry in SQL (bench/generate.py; Tier B is 10^5
repositories and ~10^6 findings), then post the log `--runs` times to one new repository, each run a new commit and
SARIF run guid: the first run creates 200 canonical findings, the later ones match them (a nightly scan). The
moderator token is exempt from quotas, so every run is stored. Also the pure mapping's time in this process.

    .venv/bin/python -m bench.sarif_bench --tier B [--runs 30] [--no-write]

Writes bench/out/sarif.json and its section of docs/benchmarks.md."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from typing import Any

import httpx

from bench.common import bench_parser, pct, publish, server_ms, timed_generate, vacuum_analyze
from bench.services import throwaway_services

HEADING = "## SARIF ingestion (bench/sarif_bench.py)"
RESULTS = 200
URL = "/api/v1/repos/github.com/bench/sarif/reports"


def sarif_log(run: int) -> dict[str, Any]:
    """A CodeQL-shaped log: 20 rules with security-severity, 200 results over 40 files, partial fingerprints."""
    rules = [
        {
            "id": f"py/rule-{r}",
            "name": f"py/rule-{r}",
            "shortDescription": {"text": f"Benchmark rule {r}: user input reaches a sensitive sink"},
            "fullDescription": {"text": "Data from a remote source flows to a sink without sanitization. " * 4},
            "help": {"text": "Sanitize or validate the value before it reaches the sink. " * 8},
            "defaultConfiguration": {"level": "error" if r % 3 else "warning"},
            "properties": {"tags": ["security"], "security-severity": f"{4 + r % 6}.5"},
        }
        for r in range(20)
    ]
    results = [
        {
            "ruleId": f"py/rule-{i % 20}",
            "ruleIndex": i % 20,
            "message": {"text": f"This value depends on a [user-provided value](1) (path {i})."},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": f"src/module_{i % 40}/handlers.py", "uriBaseId": "%SRCROOT%"},
                        "region": {"startLine": 10 + i, "startColumn": 5, "endColumn": 40},
                    }
                }
            ],
            "partialFingerprints": {"primaryLocationLineHash": hashlib.sha256(str(i).encode()).hexdigest()[:16] + ":1"},
        }
        for i in range(RESULTS)
    ]
    commit = hashlib.sha1(f"commit-{run}".encode()).hexdigest()
    return {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {"name": "CodeQL", "semanticVersion": "2.15.3", "rules": []},
                    "extensions": [{"name": "codeql/python-queries", "semanticVersion": "0.9.4", "rules": rules}],
                },
                "automationDetails": {"guid": f"00000000-0000-4000-8000-{run:012d}"},
                "versionControlProvenance": [{"repositoryUri": "https://github.com/bench/sarif", "revisionId": commit}],
                "results": [r | {"rule": {"index": r["ruleIndex"], "toolComponent": {"index": 0}}} for r in results],
            }
        ],
    }


async def _setup() -> str:
    from app.accounts.service import create_account, create_token
    from app.kernel import db
    from app.registry.service import register_repository

    try:
        account = await create_account(
            "sarif-bench@example.com", "sarifbench", platform_role="moderator", state="active"
        )
        token = await create_token(account.id, ["findings:submit"])
        await register_repository("github.com", "bench", "sarif", submitted_by_id=account.id)
    finally:
        await db.dispose_engines()
    return token


def mapping_ms(runs: int) -> list[float]:
    from app.reports.sarif import sarif_to_report

    times = []
    for n in range(runs):
        log = sarif_log(n)
        started = time.perf_counter()
        sarif_to_report(log)
        times.append((time.perf_counter() - started) * 1000)
    return times


def run(tier_name: str, runs: int) -> dict[str, Any]:
    with throwaway_services("tarakan-sarif-bench-") as services:
        env = services.use()
        rows, generated = timed_generate(services.dsn, tier_name)
        vacuum_analyze(services.dsn)
        print(f"[{tier_name}] generated in {generated:.0f}s: {rows}", flush=True)
        token = asyncio.run(_setup())
        _, base = services.serve(env)
        from app.reports.sarif import sarif_to_report

        load_before = os.getloadavg()[0]
        posts: list[dict[str, Any]] = []
        v1_posts: list[dict[str, Any]] = []
        with httpx.Client(base_url=base, timeout=120) as client:
            for n in range(runs):
                # interleaved with the same 200 findings as a Scan Format v1 body (another commit): the SARIF cost
                # as a ratio that holds on a shared machine
                sarif_body = json.dumps(sarif_log(n)).encode()
                v1_body = json.dumps(sarif_to_report(sarif_log(runs + n)).body).encode()
                for kind, body, content_type, into in (
                    ("sarif", sarif_body, "application/sarif+json", posts),
                    ("v1", v1_body, "application/json", v1_posts),
                ):
                    headers = {"Authorization": f"Bearer {token}", "Content-Type": content_type}
                    began = time.perf_counter()
                    response = client.post(URL, content=body, headers=headers)
                    round_trip = (time.perf_counter() - began) * 1000
                    assert response.status_code == 201, response.text[:500]
                    assert response.json()["findings_count"] == RESULTS
                    into.append({"server_ms": server_ms(response), "round_trip_ms": round_trip, "bytes": len(body)})
                    print(f"  run {n + 1} {kind}: server {into[-1]['server_ms']:.0f} ms", flush=True)
        load_after = os.getloadavg()[0]
    return {
        "tier": tier_name,
        "rows": rows,
        "generate_s": generated,
        "posts": posts,
        "v1_posts": v1_posts,
        "mapping_ms": mapping_ms(runs),
        "load_average": [load_before, load_after],
    }


def render(r: dict[str, Any], command: str) -> str:
    posts = r["posts"]
    later = posts[1:] or posts
    server = [p["server_ms"] for p in later]
    trip = [p["round_trip_ms"] for p in later]
    mapping = r["mapping_ms"]
    v1 = [p["server_ms"] for p in r["v1_posts"][1:] or r["v1_posts"]]
    load = r["load_average"]
    return "\n".join(
        [
            HEADING,
            "",
            f"Command: `{command}` (one `tarakan serve`).",
            "",
            f"Registry: Tier {r['tier']}: {r['rows']['repositories']:,} repositories, "
            f"{r['rows']['scan_findings']:,} finding occurrences (generated in {r['generate_s']:.0f} s). A CodeQL-shaped "
            f"log of {RESULTS} results ({posts[0]['bytes']:,} bytes) to one repository, a new commit each run: the first "
            "creates the canonicals, the later runs match them.",
            "",
            "| measure | runs | p50 ms | p95 ms |",
            "|---|---:|---:|---:|",
            f"| first run, server time (`Server-Timing: app;dur`) | 1 | {posts[0]['server_ms']:.0f} | |",
            f"| later runs, server time | {len(later)} | {pct(server, 0.5):.0f} | {pct(server, 0.95):.0f} |",
            f"| later runs, client round trip | {len(later)} | {pct(trip, 0.5):.0f} | {pct(trip, 0.95):.0f} |",
            f"| the same 200 findings as Scan Format v1, server time (interleaved) | {len(v1)} | "
            f"{pct(v1, 0.5):.0f} | {pct(v1, 0.95):.0f} |",
            f"| the SARIF mapping alone (in process) | {len(mapping)} | {pct(mapping, 0.5):.1f} | "
            f"{pct(mapping, 0.95):.1f} |",
            "",
            f"- SARIF ÷ Scan Format v1, server time p50: {pct(server, 0.5) / pct(v1, 0.5):.2f} (the mapping and the "
            "larger body).",
            f"- Load average at the start and end of the posts: {load[0]:.1f}, {load[1]:.1f} (read the ratio).",
        ]
    )


def main() -> None:
    args = bench_parser(__doc__, runs=30).parse_args()
    command = f"python -m bench.sarif_bench --tier {args.tier} --runs {args.runs}"
    publish("sarif", run(args.tier, args.runs), render, HEADING, args, command)


if __name__ == "__main__":
    main()
