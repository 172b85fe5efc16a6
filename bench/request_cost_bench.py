"""Web-process CPU per request, by kind of request (issue 27): where a report's web milliseconds go.

    .venv/bin/python -m bench.request_cost_bench --tier A [--requests 400] [--runs 3] [--baseline DIR] [--no-write]

On a throw-away embedded Postgres + Valkey with a generated registry, one real `tarakan serve` answers, eight at a
time over keep-alive connections, `--requests` of each kind in turn: `GET /healthz` (the HTTP stack), a report with
a bad token (401: refused before the body is read), a report whose body is invalid (422: the bearer check, the body's
read, parse and validation, no transaction) and a valid one-finding report (201: all of it). The figure is the web
process's CPU seconds (/proc) over the kind's requests, so the differences between kinds say what each step costs.
`--baseline DIR` serves a second source tree (e.g. a git worktree of the commit before a change) on the same database,
the two trees' runs interleaved. No worker runs: the drain's cost is the capacity bench's.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import uvloop

from bench.capacity_bench import Client, Commits, capacity_report, demo_forge, make_submitters
from bench.common import (
    backfill,
    bench_parser,
    cpu_seconds,
    listed_repositories,
    publish,
    timed_generate,
    vacuum_analyze,
)
from bench.services import throwaway_services
from tests.harness import ROOT, start_server, stop

HEADING = "## Request cost (bench/request_cost_bench.py, issue 27)"
IN_FLIGHT = 8
TOKENS = 8
Request = tuple[str, str, bytes, str]  # method, path, body, bearer token


async def _get(base: str, path: str) -> int:
    host, _, port = base.removeprefix("http://").partition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    answer = await reader.read()
    writer.close()
    return int(answer.split(b" ", 2)[1])


async def _send(base: str, make: Callable[[int], Request], count: int) -> dict[int, int]:
    client = Client(IN_FLIGHT)
    slots = asyncio.Semaphore(IN_FLIGHT)
    statuses: dict[int, int] = {}

    async def one(i: int) -> None:
        async with slots:
            method, path, body, token = make(i)
            code = await _get(base, path) if method == "GET" else (await client.post(base, path, body, token))[0]
            statuses[code] = statuses.get(code, 0) + 1

    try:
        await asyncio.gather(*(one(i) for i in range(count)))
    finally:
        client.close()
    return statuses


def _kinds(tokens: list[str], repos: list[tuple[str, str, str]]) -> dict[str, Callable[[int], Request]]:
    seq = [10**6]

    def report(valid: bool) -> Callable[[int], Request]:
        def make(_i: int) -> Request:
            seq[0] += 1
            host, owner, name = repos[seq[0] % len(repos)]
            body = capacity_report(seq[0])
            if not valid:
                body["commit_sha"] = "not a commit"
            path = f"/api/v1/repos/{host}/{owner}/{name}/reports"
            return "POST", path, msgspec.json.encode(body), tokens[seq[0] % len(tokens)]

        return make

    return {
        "GET /healthz": lambda _i: ("GET", "/healthz", b"", ""),
        "report, bad token (401)": lambda _i: ("POST", "/api/v1/repos/a/b/c/reports", b"{}", "not-a-token"),
        "report, invalid body (422)": report(False),
        "report (201)": report(True),
    }


GATE_KIND = "report, gate on (201)"


def _gated(tokens: list[str], commits: Commits) -> Callable[[int], Request]:
    """Reports as the capacity bench's with --gate: report n cites `commits.of(n)`, on that commit's repository."""
    seq = [0]

    def make(_i: int) -> Request:
        n = seq[0]
        seq[0] += 1
        host, owner, name = commits.repo(n)
        path = f"/api/v1/repos/{host}/{owner}/{name}/reports"
        return "POST", path, msgspec.json.encode(capacity_report(n, commits)), tokens[n % len(tokens)]

    return make


def run(tier_name: str, args: Any) -> dict[str, Any]:
    trees = [ROOT, *([Path(args.baseline).resolve()] if args.baseline else [])]
    results: dict[str, Any] = {"tier": tier_name, "requests": args.requests, "trees": {}}
    with throwaway_services("tarakan-request-cost-") as services:
        env = services.use(
            REGISTRY_STATS_TTL="30", INFESTATIONS_READ_FROM_ROLLUP="true", REFUSED_PER_MINUTE="0", EVIDENCE_CHECK="off"
        )
        results["rows"], _ = timed_generate(services.dsn, tier_name)
        backfill(None, concurrency=2)
        vacuum_analyze(services.dsn)
        tokens = make_submitters(services.dsn, TOKENS)
        repos = listed_repositories(services.dsn)
        kinds = _kinds(tokens, repos)
        commits = Commits(repos, args.per_commit)
        gated = _gated(tokens, commits)
        planned = (commits.active * commits.per_commit + args.requests * args.runs) * len(trees) + 1
        servers: list[tuple[Path, subprocess.Popen[bytes], str, dict[str, Callable[[int], Request]]]] = []
        with demo_forge(services.dsn, commits, planned) as (_forge, forge_env):
            try:
                for tree in trees:
                    proc, base = start_server(env, quiet=True, cwd=tree)
                    servers.append((tree, proc, base, kinds))
                    uvloop.run(_send(base, kinds["report (201)"], 50))  # warm: pools, prepared statements
                    proc, base = start_server({**env, **forge_env}, quiet=True, cwd=tree)
                    servers.append((tree, proc, base, {GATE_KIND: gated}))
                    # every active commit through its run once: the caches hold what earlier reports fetched,
                    # a quarter of reports still cite a file first (as at the capacity bench's steady steps)
                    uvloop.run(_send(base, gated, commits.active * commits.per_commit))
                _measure(results, servers, args)
            finally:
                for _, proc, _, _ in servers:
                    stop(proc)
    return results


def _measure(
    results: dict[str, Any],
    servers: list[tuple[Path, subprocess.Popen[bytes], str, dict[str, Callable[[int], Request]]]],
    args: Any,
) -> None:
    """Each server's kinds in turn, `args.runs` times, the servers' order reversed every other run."""
    for run_no in range(args.runs):
        for tree, proc, base, kinds in servers if run_no % 2 == 0 else servers[::-1]:
            figures = results["trees"].setdefault(tree_label(tree), {})
            for kind, make in kinds.items():
                before = cpu_seconds(proc.pid, children=True)
                statuses = uvloop.run(_send(base, make, args.requests))
                ms = (cpu_seconds(proc.pid, children=True) - before) / args.requests * 1e3
                figures.setdefault(kind, []).append(ms)
                print(f"  {tree_label(tree)} run {run_no}: {kind}: {ms:.2f} ms {statuses}", flush=True)


def tree_label(tree: Path) -> str:
    return "this tree" if tree == ROOT else tree.name


def render(r: dict[str, Any], command: str) -> str:
    trees = list(r["trees"])
    kinds = list(next(iter(r["trees"].values())))
    lines = [
        HEADING, "",
        f"Command: `{command}`. Tier {r['tier']}; {r['requests']} requests of each kind a run, {IN_FLIGHT} in flight, "
        "one `tarakan serve`, no worker. Web-process CPU ms per request, median of the runs (worst in brackets).", "",
        "| kind | " + " | ".join(trees) + (" | ratio |" if len(trees) == 2 else ""),
        "|---|" + "---|" * (len(trees) + (1 if len(trees) == 2 else 0)),
    ]  # fmt: skip
    for kind in kinds:
        cells = [f"{statistics.median(r['trees'][t][kind]):.2f} ({max(r['trees'][t][kind]):.2f})" for t in trees]
        ratio = ""
        if len(trees) == 2:
            a, b = (statistics.median(r["trees"][t][kind]) for t in trees)
            ratio = f" {a / b:.2f} |" if b else " |"
        lines.append(f"| {kind} | " + " | ".join(cells) + " |" + ratio)
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = bench_parser(__doc__, runs=3)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--baseline", metavar="DIR", help="a second source tree served on the same database")
    parser.add_argument("--per-commit", type=int, default=20, help="gate on: reports citing each commit")
    args = parser.parse_args()
    publish("request_cost", run(args.tier, args), render, HEADING, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
