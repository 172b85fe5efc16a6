"""Batch submission throughput (issue 27, Deliver 3; target >= 400 findings/s). Not a test: prints a table and writes
it to docs/benchmarks.md ("## Batch submission").

    .venv/bin/python -m bench.batch_bench --tier B --runs 3

On a throw-away embedded Postgres + Valkey with the tier's registry generated in SQL (bench/generate.py) and its
rollups backfilled, one `tarakan serve` and one `tarakan worker`. For each shape (lines x findings a line), each run
sends the same kind of reports both ways from one admin token (exempt from the report limits, like a trusted
scanner fleet; a member's token stores 5 a minute per repository either way): one `POST /api/v1/reports/batch`,
and the same number of reports one at a time through `POST /api/v1/repos/.../reports` (sequential: one account's
reports queue on its row anyway). Reports go to existing repositories; half the findings are on shared patterns,
half fresh (as bench/capacity_bench.py); the registry's export is built before the worker starts. Findings/s = findings stored / wall time of the sending; CPU ms per
finding of the web process, the worker (until the drain is done) and Postgres. Medians over the runs, the worst
run beside them; the two paths alternate within a run, so machine noise falls on both.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx
import psycopg

from bench.common import bench_parser, cpu_seconds, listed_repositories, prepared_tier, publish
from bench.services import throwaway_services
from tests.harness import spawn

HEADING = "## Batch submission"
SHAPES = ((40, 25), (100, 5), (100, 1))  # (lines, findings a line): every batch fits the request's 5 s
TARGET = 400.0  # findings/s (issue 27)


def submitter(dsn: str) -> str:
    """An admin account (exempt from the report limits) and its token."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        account_id = conn.execute(
            "INSERT INTO accounts (email, handle, platform_role, trust_tier, state) "
            "VALUES ('batch@example.com', 'batchbench', 'admin', 'reviewer', 'active') RETURNING id"
        ).fetchone()
    assert account_id is not None

    async def token() -> str:
        from app.accounts.service import create_token
        from app.kernel import db

        try:
            return await create_token(int(account_id[0]), ["findings:submit"])
        finally:
            await db.dispose_engines()

    return asyncio.run(token())


def report(n: int, findings: int, rng: random.Random) -> dict[str, Any]:
    """Report n: `findings` findings, half on shared patterns, half fresh."""
    items = []
    for k in range(findings):
        shared = rng.random() < 0.5
        title = f"shared pattern {rng.randrange(2, 3000)} injection in handler" if shared else f"fresh finding {n}.{k}"
        items.append(
            {"file": f"batch/file_{n}_{k}.py", "line_start": 1 + k, "severity": "high", "title": title,
             "description": "batch bench finding"}
        )  # fmt: skip
    return {"commit_sha": f"{n:040x}", "model": "bench", "prompt_version": "bench/batch", "run_id": f"batch-{n}",
            "document": {"tarakan_scan_format": 1, "findings": items}}  # fmt: skip


def drained(dsn: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute("SELECT count(*) FROM infestation_dirty_keys").fetchone()
            if row is not None and row[0] == 0:
                return
            time.sleep(0.1)


def measured(
    send: Callable[[], tuple[int, dict[str, int]]], dsn: str, cpu: Callable[[], dict[str, float]]
) -> dict[str, Any]:
    """One sending: findings stored, its wall seconds, statuses, and CPU ms per finding (the drain included)."""
    drained(dsn)
    before = cpu()
    started = time.perf_counter()
    findings, statuses = send()
    wall = time.perf_counter() - started
    sent = cpu()
    drained(dsn)
    after = cpu()
    per = max(1, findings)
    return {"findings": findings, "seconds": wall, "findings_per_s": findings / wall, "statuses": statuses,
            "cpu_ms_per_finding": {k: (v - before[k]) * 1000 / per for k, v in sent.items()},
            "drain_cpu_ms_per_finding": {k: (after[k] - v) * 1000 / per for k, v in sent.items()}}  # fmt: skip


def run(tier_name: str, args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"tier": tier_name, "runs": args.runs, "shapes": []}
    with throwaway_services("tarakan-batch-bench-") as services:
        dsn = services.dsn
        env, results["rows"] = prepared_tier(services, tier_name)
        token = submitter(dsn)
        repos = ["/".join(coordinates) for coordinates in listed_repositories(dsn, 500)]
        web, base = services.serve(env)
        worker = spawn("worker", env=env, quiet=True)
        services.procs.append(worker)
        assert services.pg.proc is not None
        postmaster = services.pg.proc.pid

        def cpu() -> dict[str, float]:
            return {
                "web": cpu_seconds(web.pid, children=True),
                "worker": cpu_seconds(worker.pid),
                "postgres": cpu_seconds(postmaster, children=True),
            }

        headers = {"Authorization": f"Bearer {token}"}
        client = httpx.Client(timeout=60)
        rng = random.Random(27)
        seq = [0]

        def reports(lines: int, findings: int) -> list[tuple[str, dict[str, Any]]]:
            batch = []
            for _ in range(lines):
                seq[0] += 1
                batch.append((rng.choice(repos), report(seq[0], findings, rng)))
            return batch

        def batch_send(lines: int, findings: int) -> tuple[int, dict[str, int]]:
            body = "".join(json.dumps({"repository": ref, **r}) + "\n" for ref, r in reports(lines, findings))
            response = client.post(
                f"{base}/api/v1/reports/batch", content=body, headers=headers | {"Content-Type": "application/x-ndjson"}
            )
            assert response.status_code == 200, response.text
            answers = [json.loads(text) for text in response.text.splitlines()]
            statuses: dict[str, int] = {}
            for a in answers:
                statuses[str(a["status"])] = statuses.get(str(a["status"]), 0) + 1
            return sum(a["report"]["findings_count"] for a in answers if a["status"] == 201), statuses

        def single_send(lines: int, findings: int) -> tuple[int, dict[str, int]]:
            stored, statuses = 0, dict[str, int]()
            for ref, r in reports(lines, findings):
                response = client.post(f"{base}/api/v1/repos/{ref}/reports", json=r, headers=headers)
                statuses[str(response.status_code)] = statuses.get(str(response.status_code), 0) + 1
                if response.status_code == 201:
                    stored += response.json()["findings_count"]
            return stored, statuses

        batch_send(20, 2)  # warm: pools, caches, prepared plans
        single_send(20, 2)
        for lines, findings in SHAPES:
            shape: dict[str, Any] = {"lines": lines, "findings_per_line": findings, "batch": [], "single": []}
            for n in range(args.runs):
                order: list[tuple[str, Callable[[int, int], tuple[int, dict[str, int]]]]] = [
                    ("batch", batch_send),
                    ("single", single_send),
                ]
                for name, send in order if n % 2 == 0 else order[::-1]:
                    shape[name].append(measured(functools.partial(send, lines, findings), dsn, cpu))
                    print(f"{lines}x{findings} {name}: {shape[name][-1]['findings_per_s']:.0f} findings/s", flush=True)
            results["shapes"].append(shape)
        client.close()
    results["load_average"] = os.getloadavg()
    return results


def _median(samples: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(s[key] for s in samples))


def _cpu(samples: list[dict[str, Any]], kind: str, key: str = "cpu_ms_per_finding") -> float:
    return float(statistics.median(s[key][kind] for s in samples))


def render(r: dict[str, Any], command: str) -> str:
    lines = [
        HEADING,
        "",
        f"Command: `{command}` ({r['runs']} runs a shape; target >= {TARGET:.0f} findings/s; load average at the end "
        f"{' / '.join(f'{x:.1f}' for x in r['load_average'])}). One `tarakan serve` and one `tarakan worker`, an "
        "admin token (no report limits). Each run sends one batch (`POST /api/v1/reports/batch`) and the same reports one at a time, "
        "alternating which goes first. Findings/s: stored over the sending's wall time (median, worst run in "
        "brackets); CPU ms per finding of web / worker / Postgres while sending, and of the drain after it.",
        "",
        "| lines x findings | batch findings/s | one at a time findings/s | ratio | batch request s | "
        "batch CPU ms/finding | one at a time CPU ms/finding | drain after the batch, CPU ms/finding |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for shape in r["shapes"]:
        b, s = shape["batch"], shape["single"]
        fb, fs = _median(b, "findings_per_s"), _median(s, "findings_per_s")
        worst_b, worst_s = min(x["findings_per_s"] for x in b), min(x["findings_per_s"] for x in s)
        cpu_b = " / ".join(f"{_cpu(b, k):.2f}" for k in ("web", "worker", "postgres"))
        cpu_s = " / ".join(f"{_cpu(s, k):.2f}" for k in ("web", "worker", "postgres"))
        drain = " / ".join(f"{_cpu(b, k, 'drain_cpu_ms_per_finding'):.2f}" for k in ("web", "worker", "postgres"))
        lines.append(
            f"| {shape['lines']} x {shape['findings_per_line']} | {fb:.0f} ({worst_b:.0f}) | {fs:.0f} ({worst_s:.0f}) "
            f"| {fb / fs:.2f} | {_median(b, 'seconds'):.2f} | {cpu_b} | {cpu_s} | {drain} |"
        )
    statuses = sorted({k for shape in r["shapes"] for x in shape["batch"] for k in x["statuses"]})
    lines += ["", f"Batch line statuses seen: {', '.join(statuses)} (429: a line cut by the request's time)."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = bench_parser(__doc__, runs=3)
    args = parser.parse_args()
    publish("batch", run(args.tier, args), render, HEADING, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
