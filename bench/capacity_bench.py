"""Ingest capacity (issue 15 item 4). Not a test: prints the curve and writes it to docs/benchmarks.md.

    .venv/bin/python -m bench.capacity_bench --tier B --step-seconds 20    # ~20 minutes on 2 cores

On a throw-away embedded Postgres + Valkey: generate the registry in SQL (bench/generate.py), backfill the rollups,
then for each configuration (web processes x workers: 1x1, 1x2, 2x1, 2x2) start real `tarakan serve` and
`tarakan worker` processes and submit reports through the real API (`POST /api/v1/repos/.../reports`, bearer
tokens of several accounts, round-robin over the web processes) at a fixed rate, open loop, for `--step-seconds`,
stepping the rate up (x1.5) past the knee (commit-to-atlas lag p95 above 1 s, or errors): until the rate is not
achieved (< 90 %) or two steps in a row are past it. Each step records CPU ms per accepted report of the web
processes, the workers and Postgres (steadier than wall figures on a shared machine). Lag is bench/infestations_bench.py's measurement (`poll_lag`): from the 2xx answer to the moment
the report's canonical shows in the atlas with its new `updated_at`.

Two web processes are `tarakan serve --workers 2` when the command has that option, else two `tarakan serve`
processes on two ports. Client, servers, workers and Postgres share the machine's cores.

The evidence gate is off (`EVIDENCE_CHECK=off`: no forge request) unless `--gate`: then the loopback demo forge
(`python -m app.forge.demo --dir`, a process of its own whose CPU is counted apart, like the client's) holds the
repositories, their commits and the files the reports cite, every `FORGE_*` base points at it, `EVIDENCE_CHECK=gate`
and the forge rate is high enough not to bind (`FORGE_REQUESTS_PER_SECOND`, `FORGE_BURST`). Reports reuse commits as
agents' runs do (`--per-commit`, 20: the forge is asked for a commit once, for a file once, then the caches answer),
so every finding is confirmed at submission; the step fails on any report left pending or refused.
Each curve starts with a warm-up at its first rate (`WARM_SECONDS`, not counted): the active commits' runs under way.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import queue
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import psycopg
import uvloop
from psycopg import sql

from bench.common import (
    bench_parser,
    cpu_seconds,
    listed_repositories,
    pct,
    prepared_tier,
    publish,
    write_section,
)
from bench.infestations_bench import poll_lag
from bench.services import Services, throwaway_services
from tests.harness import ROOT, spawn, start_server, stop

HEADING = "## Ingest capacity"
GATE_HEADING = "## Ingest capacity with the evidence gate on"  # --gate's own section: the gate-off one stays
LAG_TARGET_S = 1.0
CONFIGS = ((1, 1), (1, 2), (2, 1), (2, 2))  # (web processes, workers)
# submitters: each report locks its account's row, so one account would serialise them all; 8 accounts allowed 8
# reports in flight, i.e. 20/s once a report waited 400 ms for the shared cores
ACCOUNTS = 32
MAX_IN_FLIGHT = 128
# Half the reports are on existing shared patterns (bench/generate.py's "shared pattern N", N in 2..2999, as
# bench/infestations_bench.py's probes), taken round-robin in a fixed shuffled order rather than at random: a key
# comes back every 5,996 reports (40 s at 150 reports/s), longer than the hot-key interval (30 s), so no key is hot
# and no report is deferred by design (docs/domain.md §5.5); drawn at random, up to half of the shared ones could be.
SHARED = random.Random(27).sample(range(2, 3000), 2998)
BENCH_APP = "capacity-bench"  # application_name of the bench's own connections: their Postgres CPU is counted apart


def capacity_report(n: int, commits: Commits | None = None) -> dict[str, Any]:
    """Report n: one finding; even reports on a shared pattern (round-robin over `SHARED`), odd ones fresh. With
    the gate (`commits`), its commit and file are ones the forge holds (`Commits.of`), else its own."""
    shared = SHARED[n // 2 % len(SHARED)]
    title = f"shared pattern {shared} injection in handler" if n % 2 == 0 else f"fresh finding {n} cap"
    sha, path = commits.of(n)[1:] if commits else (f"{n:040x}", f"cap/file_{n}.py")
    finding = {"file": path, "severity": "high", "title": title, "description": "cap probe",
               "line_start": 1 + n % FILE_LINES}  # fmt: skip
    return {"commit_sha": sha, "model": "bench", "prompt_version": "bench/cap", "run_id": f"cap-{n}",
            "document": {"tarakan_scan_format": 1, "findings": [finding]}}  # fmt: skip


# ---- the evidence gate (--gate): the loopback demo forge and the commits the reports use -------------------------

FILE_LINES = 1000  # a report cites line 1 + n % FILE_LINES: every file the forge holds has that many
FILES_PER_COMMIT = 5  # the files a commit's reports cite in turn: the forge is asked for each once, at its first
# With the gate, each curve begins with WARM_SECONDS at its first rate, not counted: there every active commit's
# first report arrives at once (200 commits asked of the forge in a second), which a registry taking reports all
# day never sees; the cold start (`--cold-start`) is the step that measures a start.
WARM_SECONDS = 10
ACTIVE_COMMITS = 200  # commits taking reports at once (consecutive reports on different repositories)
# the forge's rate (per host and base: API, raw) far above what the steps ask (<= 0.4 forge requests a report)
FORGE_RATE = {"FORGE_REQUESTS_PER_SECOND": "2000", "FORGE_BURST": "2000"}


@dataclass(frozen=True)
class Commits:
    """Which commit and file report n cites with the gate on: `per_commit` reports a commit, as agents' runs of
    one commit do, spread over time: `ACTIVE_COMMITS` commits (each of its own repository) take reports in turn,
    each at its own phase, so at every rate some reports are a commit's first (the forge asked for the commit and
    its file), some a file's first (the file asked), the rest answered by the caches."""

    repos: list[tuple[str, str, str]]
    per_commit: int

    @property
    def active(self) -> int:
        return min(ACTIVE_COMMITS, len(self.repos))

    def of(self, n: int) -> tuple[int, str, str]:
        """(commit index, sha, path) of report n; commit k is on repository `repos[k % len(repos)]`."""
        slot, turn = n % self.active, n // self.active + n % self.active * self.per_commit // self.active
        k = turn // self.per_commit * self.active + slot
        return k, commit_sha(k), f"cap/file_{turn % self.per_commit % FILES_PER_COMMIT}.py"

    def repo(self, n: int) -> tuple[str, str, str]:
        return self.repos[self.of(n)[0] % len(self.repos)]


def commit_sha(k: int) -> str:
    return hashlib.sha1(f"capacity-bench commit {k}".encode()).hexdigest()


def file_body(path: str) -> bytes:
    return f"# {path}\n".encode() + "".join(f"x = {i}\n" for i in range(1, FILE_LINES)).encode()


def planned_reports(args: argparse.Namespace) -> int:
    """The most reports a run sends (each step sends at most rate x seconds): how many commits the forge holds."""
    rates = []
    rate = args.start_rate
    while rate <= args.max_rate:
        rates.append(rate)
        rate = round(rate * args.factor)
    cold = max(args.cold_rate or 0, *rates) if args.cold_start else 0
    curve = (sum(rates) * args.step_seconds + cold * args.step_seconds + args.start_rate * WARM_SECONDS) * len(
        args.configs
    )
    if args.profile:
        profiles = args.profile * (10 + args.step_seconds) * len(args.trees)
        return int(profiles + (curve if args.curve else 0)) + 1
    return int(curve) + 1


@contextmanager
def demo_forge(dsn: str, commits: Commits, reports: int) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, str]]]:
    """The loopback demo forge as a process (`python -m app.forge.demo --dir`), holding each repository of
    `commits` with the commits `reports` reports cite (all on the default branch, each with the
    `FILES_PER_COMMIT` files), those repositories' default branch stored as registration under the gate stores it
    (else each new commit asks the forge for the repository too): the process and the settings pointing every
    `FORGE_*` base at it, with the gate on."""
    from app.devforge import publish_repository
    from app.devservices import free_port

    last = max(commits.of(n)[0] for n in range(max(0, reports - 2 * commits.active * commits.per_commit), reports + 1))
    shas: dict[int, list[tuple[str, None]]] = {}
    for k in range(last + 1):
        shas.setdefault(k % len(commits.repos), []).append((commit_sha(k), None))
    paths = [f"cap/file_{i}.py" for i in range(FILES_PER_COMMIT)]
    files = {p: file_body(p) for p in paths}
    with tempfile.TemporaryDirectory(prefix="tarakan-capacity-forge-") as folder:
        for r, listed in shas.items():
            host, owner, name = commits.repos[r]
            publish_repository(Path(folder), host, owner, name, {}, listed, files)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "UPDATE repositories SET default_branch = 'main' WHERE (host, owner, name) IN "
                "(SELECT * FROM unnest(%s::text[], %s::text[], %s::text[]))",
                ([h for h, _, _ in commits.repos], [o for _, o, _ in commits.repos], [n for _, _, n in commits.repos]),
            )
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.forge.demo", "--dir", folder, "--port", str(port)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            settings = dict(proc.stdout.readline().decode().strip().partition("=")[::2] for _ in range(5))
            if not all(k.startswith("FORGE_") for k in settings):
                raise RuntimeError(f"the demo forge did not start: {settings}")
            print(f"[gate] demo forge on port {port}: {len(shas)} repositories, {last + 1} commits", flush=True)
            yield proc, {**settings, **FORGE_RATE, "EVIDENCE_CHECK": "gate"}
        finally:
            stop(proc)


def bench_dsn(dsn: str) -> str:
    """The bench's own connections (answer resolver, lag poller) are named, so their backends' CPU is not charged
    to the server's Postgres share."""
    return f"{dsn}{'&' if '?' in dsn else '?'}application_name={BENCH_APP}"


class BenchBackends:
    """Samples, every 0.2 s, the CPU of the Postgres backends the bench itself holds (application_name
    `BENCH_APP`); a backend that exited keeps its last sample. `total()` is their CPU seconds so far."""

    def __init__(self, dsn: str) -> None:
        self.dsn = bench_dsn(dsn)
        self.seen: dict[int, float] = {}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stopped.is_set():
                pids = conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (BENCH_APP,)
                ).fetchall()
                for (pid,) in pids:
                    cpu = cpu_seconds(int(pid))
                    if cpu:
                        self.seen[int(pid)] = max(cpu, self.seen.get(int(pid), 0.0))
                time.sleep(0.2)

    def total(self) -> float:
        return sum(self.seen.values())

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)


@dataclass
class Step:
    """One rate step: what was sent, what came back, and the lag of every report that reached the atlas."""

    target: float
    seconds: float
    statuses: dict[str, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    lags: list[float] = field(default_factory=list)
    skipped: int = 0  # scheduled while MAX_IN_FLIGHT requests were still unanswered
    unreflected: int = 0
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds used during the step, by process kind
    evidence: dict[str, int] | None = None  # with the gate: the answered findings' evidence states

    @property
    def ok(self) -> int:
        return self.statuses.get("201", 0) + self.statuses.get("200", 0)

    @property
    def achieved(self) -> float:
        return self.ok / self.seconds

    def knee(self) -> str | None:
        """Why this step is past the knee, or None."""
        if not self.lags or pct(self.lags, 0.95) > LAG_TARGET_S:
            return "lag p95 > 1 s"
        if self.achieved < 0.9 * self.target:
            return "achieved < 90 % of target"
        if self.ok < sum(self.statuses.values()) or self.skipped:
            return "errors"
        if self.unreflected:
            return "reports not in the atlas within 60 s"
        if self.evidence is not None and self.ok and self.evidence.get("confirmed", 0) < self.ok:
            return "evidence not confirmed at submission"
        return None

    def row(self) -> dict[str, Any]:
        lag = sorted(self.lags)
        lat = sorted(self.latencies)
        return {
            "target": self.target,
            "achieved": self.achieved,
            "lag_p50_ms": statistics.median(lag) * 1000 if lag else None,
            "lag_p95_ms": pct(lag, 0.95) * 1000 if lag else None,
            "request_p50_ms": statistics.median(lat) * 1000 if lat else None,
            "request_p95_ms": pct(lat, 0.95) * 1000 if lat else None,
            "statuses": self.statuses,
            "skipped": self.skipped,
            "unreflected": self.unreflected,
            **({"evidence": self.evidence} if self.evidence is not None else {}),
            # CPU ms per accepted report: steadier than wall time on a shared machine
            "cpu_ms_per_report": {k: v * 1000 / self.ok for k, v in self.cpu.items()} if self.ok else {},
            "knee": self.knee(),
        }


def serve_supports_workers() -> bool:
    out = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", "--help"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    return "--workers" in out.stdout


def start_web(env: dict[str, str], processes: int, procs: list[subprocess.Popen[bytes]], cwd: Path = ROOT) -> list[str]:
    """Base URLs that `processes` web processes answer on (`cwd`: the source tree they run)."""
    if processes > 1 and serve_supports_workers():
        proc, base = start_server(env, quiet=True, args=("--workers", str(processes)), cwd=cwd)
        procs.append(proc)
        return [base]
    bases = []
    for _ in range(processes):
        proc, base = start_server(env, quiet=True, cwd=cwd)
        procs.append(proc)
        bases.append(base)
    return bases


def make_submitters(dsn: str, count: int) -> list[str]:
    """`count` admin accounts (exempt from daily quotas, like a trusted scanner fleet) and a token each."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO accounts (email, handle, platform_role, trust_tier, state) "
            "SELECT 'cap' || g || '@example.com', 'cap' || g, 'admin', 'reviewer', 'active' "
            "FROM generate_series(1, %s) g",
            (count,),
        )
        ids = [r[0] for r in conn.execute("SELECT id FROM accounts WHERE handle LIKE 'cap%%' ORDER BY id").fetchall()]

    async def tokens() -> list[str]:
        from app.accounts.service import create_token
        from app.kernel import db

        try:
            return [await create_token(i, ["findings:submit"]) for i in ids]
        finally:
            await db.dispose_engines()

    return asyncio.run(tokens())


class Watcher:
    """Resolves answered reports to their canonical id and measures their lag with `poll_lag`, in a thread of its
    own (its psycopg calls block), so the sender's schedule is not disturbed."""

    def __init__(self, dsn: str) -> None:
        self.dsn = bench_dsn(dsn)
        self.answered: queue.SimpleQueue[tuple[str, float]] = queue.SimpleQueue()
        self.outstanding = 0  # answered, not yet handed to poll_lag
        self.lock = threading.Lock()
        self.pending: dict[int, float] = {}
        self.lags: list[float] = []
        self.done = asyncio.Event()  # only is_set()/set() are used, from both threads
        self.last_submit = [time.perf_counter()]
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self.thread.start()

    def answer(self, public_id: str, at: float) -> None:
        with self.lock:
            self.outstanding += 1
        self.last_submit[0] = at
        self.answered.put((public_id, at))

    async def _resolve(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not (self.done.is_set() and self.outstanding == 0):
                batch: list[tuple[str, float]] = []
                while not self.answered.empty():
                    batch.append(self.answered.get())
                if batch:
                    at = dict(batch)
                    rows = conn.execute(
                        "SELECT public_id::text, canonical_finding_id FROM scan_findings WHERE public_id = ANY(%s::uuid[])",
                        (list(at),),
                    ).fetchall()
                    for public_id, canonical in rows:
                        self.pending[canonical] = at[public_id]
                    with self.lock:
                        self.outstanding -= len(batch)
                await asyncio.sleep(0.02)

    async def _run(self) -> None:
        await asyncio.gather(self._resolve(), poll_lag(self.dsn, self.pending, self.lags, self.done, self.last_submit))

    def finish(self) -> tuple[list[float], int]:
        """Wait until every answered report is resolved, then for poll_lag to see them (or give up after 60 s)."""
        while self.outstanding:
            time.sleep(0.02)
        self.done.set()
        self.thread.join(timeout=120)
        return self.lags, len(self.pending)


IDLE_SECONDS = 2.0  # a kept connection idle longer is not reused: uvicorn closes idle ones after 5 s


class Client:
    """The bench's keep-alive HTTP/1.1 client for its report POSTs: one request a connection at a time, at most
    `limit` connections. Not httpx: httpx cost 4-6 ms of CPU a request on the two cores the servers are measured on
    (about as much as the web process's own share at 150 reports/s); this costs a few hundred microseconds. It speaks
    only what `tarakan serve` answers here (Content-Length bodies)."""

    def __init__(self, limit: int, timeout: float = 30) -> None:
        self.idle: dict[tuple[str, int], list[tuple[asyncio.StreamReader, asyncio.StreamWriter, float]]] = {}
        self.limit = asyncio.Semaphore(limit)
        self.timeout = timeout

    async def post(self, base: str, path: str, body: bytes, token: str) -> tuple[int, bytes]:
        """(status, body) of one POST; raises OSError, asyncio.IncompleteReadError, TimeoutError or ValueError."""
        host, _, port = base.removeprefix("http://").partition(":")
        where = (host, int(port or 80))
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        async with self.limit:
            pool = self.idle.setdefault(where, [])
            while pool and pool[-1][2] < time.monotonic() - IDLE_SECONDS:  # the server may have closed it
                pool.pop()[1].close()
            reader, writer, _ = pool.pop() if pool else (*await asyncio.open_connection(*where), 0.0)
            try:
                async with asyncio.timeout(self.timeout):
                    writer.write(head + body)
                    status, length, keep = self._head(await reader.readuntil(b"\r\n\r\n"))
                    answer = await reader.readexactly(length)
            except BaseException:
                writer.close()
                raise
            if keep:
                pool.append((reader, writer, time.monotonic()))
            else:
                writer.close()
            return status, answer

    @staticmethod
    def _head(raw: bytes) -> tuple[int, int, bool]:
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        if "content-length" not in headers:
            raise ValueError("an answer without Content-Length")
        return status, int(headers["content-length"]), headers.get("connection", "").lower() != "close"

    def close(self) -> None:
        for pool in self.idle.values():
            for _, writer, _ in pool:
                writer.close()


async def run_step(
    bases: list[str],
    tokens: list[str],
    repos: list[tuple[str, str, str]],
    rate: float,
    seconds: float,
    dsn: str,
    seq: list[int],
    cpu: Callable[[], dict[str, float]],
    commits: Commits | None = None,
) -> Step:
    step = Step(target=rate, seconds=seconds, evidence={} if commits else None)
    cpu_before = cpu()
    watcher = Watcher(dsn)
    rng = random.Random(int(rate * 1000))
    in_flight: set[asyncio.Task[None]] = set()
    client = Client(MAX_IN_FLIGHT)
    try:

        async def submit(n: int) -> None:
            host, owner, name = commits.repo(n) if commits else repos[rng.randrange(len(repos))]
            body = msgspec.json.encode(capacity_report(n, commits))
            path = f"/api/v1/repos/{host}/{owner}/{name}/reports"
            started = time.perf_counter()
            try:
                code, answer = await client.post(bases[n % len(bases)], path, body, tokens[n % len(tokens)])
                status = str(code)
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError) as exc:
                status, code, answer = type(exc).__name__, 0, b""
            answered = time.perf_counter()
            step.statuses[status] = step.statuses.get(status, 0) + 1
            if code in (200, 201):
                step.latencies.append(answered - started)
                found = msgspec.json.decode(answer)["findings"][0]
                watcher.answer(found["public_id"], answered)
                if step.evidence is not None:
                    state = str(found["evidence"]["state"])
                    step.evidence[state] = step.evidence.get(state, 0) + 1

        start = time.perf_counter()
        k = 0
        while (due := start + k / rate) < start + seconds:
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            k += 1
            if len(in_flight) >= MAX_IN_FLIGHT:
                step.skipped += 1
                continue
            seq[0] += 1
            task = asyncio.create_task(submit(seq[0]))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        if in_flight:
            await asyncio.wait(in_flight)
        step.seconds = max(seconds, time.perf_counter() - start)  # the answers of the last sends count too
    finally:
        client.close()
    step.lags, step.unreflected = await asyncio.to_thread(watcher.finish)
    step.cpu = {k: v - cpu_before[k] for k, v in cpu().items()}
    return step


def run_config(
    env: dict[str, str],
    dsn: str,
    postmaster: int,
    web: int,
    workers: int,
    tokens: list[str],
    args: argparse.Namespace,
    seq: list[int],
    cwd: Path = ROOT,
    forge: Forge | None = None,
) -> dict[str, Any]:
    procs: list[subprocess.Popen[bytes]] = []
    bench_backends = BenchBackends(dsn)
    try:
        bases, cpu = start_processes(env, dsn, postmaster, web, workers, procs, bench_backends, cwd, forge)
        repos = listed_repositories(dsn)
        commits = forge.commits if forge else None
        steps = []
        rate = args.start_rate
        if commits is not None:  # the active commits' runs under way, as on a registry that takes reports all day
            warm = uvloop.run(run_step(bases, tokens, repos, rate, WARM_SECONDS, dsn, seq, cpu, commits))
            print(f"  {web} web x {workers} workers, warm-up @ {rate:.0f}/s: {json.dumps(warm.row())}", flush=True)
        while rate <= args.max_rate:
            step = uvloop.run(run_step(bases, tokens, repos, rate, args.step_seconds, dsn, seq, cpu, commits))
            row = step.row()
            steps.append(row)
            print(f"  {web} web x {workers} workers @ {rate:.0f}/s: {json.dumps(row)}", flush=True)
            # a shared machine makes one step's p95 noisy: stop when the rate is not achieved or two steps in a row
            # are past the knee
            if row["knee"] and (step.achieved < 0.9 * rate or (len(steps) > 1 and steps[-2]["knee"])):
                break
            rate = round(rate * args.factor)
        mode = "serve --workers" if len(bases) < web else "processes"
        result: dict[str, Any] = {"web": web, "workers": workers, "web_mode": mode, "steps": steps}
        held = [s["target"] for s in steps if not s["knee"]]
        if args.cold_start and (held or args.cold_rate):
            sent = (tokens, repos, seq, commits)
            rate = args.cold_rate or max(held)
            result["cold"] = cold_step(
                env, dsn, postmaster, web, workers, procs, bench_backends, cwd, forge, sent, rate, args
            )
        return result
    finally:
        bench_backends.stop()
        for proc in procs:
            stop(proc)


def cold_step(
    env: dict[str, str],
    dsn: str,
    postmaster: int,
    web: int,
    workers: int,
    procs: list[subprocess.Popen[bytes]],
    bench_backends: BenchBackends,
    cwd: Path,
    forge: Forge | None,
    sent: tuple[list[str], list[tuple[str, str, str]], list[int], Commits | None],
    rate: float,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """`--cold-start`: the configuration's web and worker processes stopped and started anew (each answers once its
    pools are open), then one step at its capacity's rate at once: what a deploy or a crash costs. The database and
    the forge caches stay as the curve left them (a restart does not empty them)."""
    for proc in procs:
        stop(proc)
    procs.clear()
    tokens, repos, seq, commits = sent
    bases, cpu = start_processes(env, dsn, postmaster, web, workers, procs, bench_backends, cwd, forge, settle=0)
    row = uvloop.run(run_step(bases, tokens, repos, rate, args.step_seconds, dsn, seq, cpu, commits)).row()
    print(f"  {web} web x {workers} workers, cold start @ {rate:.0f}/s: {json.dumps(row)}", flush=True)
    return row


def start_processes(
    env: dict[str, str],
    dsn: str,
    postmaster: int,
    web: int,
    workers: int,
    procs: list[subprocess.Popen[bytes]],
    bench_backends: BenchBackends,
    cwd: Path = ROOT,
    forge: Forge | None = None,
    settle: float = 2,
) -> tuple[list[str], Callable[[], dict[str, float]]]:
    """Web processes and workers running `cwd`'s tree: their base URLs and the CPU meter of a step (seconds so far
    by kind: web, workers, Postgres less the bench's own backends, those backends, this process, and with the gate
    the demo forge's process)."""
    # the workers first: they start while the web processes do (a deploy restarts both), so a cold step does not
    # begin with reports whose drain waits for a worker still importing its code
    started = [spawn("worker", env=env, quiet=True, cwd=cwd) for _ in range(workers)]  # die with us if web fails
    bases = start_web(env, web, procs, cwd)
    web_pids = [p.pid for p in procs]
    procs += started  # web first, then workers (the profile's py-spy reads them in that order)
    worker_pids = [p.pid for p in started]

    def cpu() -> dict[str, float]:
        bench_pg = bench_backends.total()
        return {
            "web": sum(cpu_seconds(p, children=True) for p in web_pids),
            "workers": sum(cpu_seconds(p) for p in worker_pids),
            "postgres": cpu_seconds(postmaster, children=True) - bench_pg,
            "bench_postgres": bench_pg,
            "client": time.process_time(),
            **({"forge": cpu_seconds(forge.proc.pid)} if forge else {}),
        }

    time.sleep(settle)
    return bases, cpu


@dataclass(frozen=True)
class Forge:
    """The run's demo forge (--gate): its process and the commits the reports cite."""

    proc: subprocess.Popen[bytes]
    commits: Commits


@contextmanager
def gate_settings(
    env: dict[str, str], dsn: str, args: argparse.Namespace
) -> Iterator[tuple[dict[str, str], Forge | None]]:
    """The run's environment with the gate on against the demo forge (--gate), or off (`EVIDENCE_CHECK=off`: the
    default is `gate`, against the real forges)."""
    if not args.gate:
        yield {**env, "EVIDENCE_CHECK": "off"}, None
        return
    commits = Commits(listed_repositories(dsn), args.per_commit)
    with demo_forge(dsn, commits, planned_reports(args)) as (proc, settings):
        yield {**env, **settings}, Forge(proc, commits)


def over_socket(env: dict[str, str], services: Services, args: argparse.Namespace) -> dict[str, str]:
    """The server processes' environment, with `--unix-socket` their Postgres over its Unix socket (a Postgres on
    the same host: no loopback TCP stack per statement, on either side)."""
    return {**env, "DATABASE_URL": services.pg.socket_url} if args.unix_socket else env


def run(tier_name: str, args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"tier": tier_name, "configs": [], "gate": args.gate, "per_commit": args.per_commit}
    with throwaway_services("tarakan-capacity-bench-") as services:
        configure_postgres(services, server_options(args))
        results["shared_buffers"] = args.shared_buffers
        dsn = services.dsn
        t = time.perf_counter()
        env, results["rows"] = prepared_tier(services, tier_name)
        results["setup_s"] = time.perf_counter() - t
        env = over_socket(env, services, args)
        print(f"[{tier_name}] migrated, generated and backfilled in {results['setup_s']:.0f}s", flush=True)
        tokens = make_submitters(dsn, ACCOUNTS)
        seq = [0]
        assert services.pg.proc is not None
        with gate_settings(env, dsn, args) as (env, forge):
            for web, workers in args.configs:
                results["configs"].append(
                    run_config(env, dsn, services.pg.proc.pid, web, workers, tokens, args, seq, forge=forge)
                )
    return results


# ---- the profile (issue 27 Deliver 1): where one accepted report's CPU goes -------------------------------------

PROFILE_HEADING = "## Ingest profile (bench/capacity_bench.py --profile)"
# the bench's own statements (answer resolver, lag poller, backend sampler): never charged to the server
BENCH_STATEMENTS = ("public_id = ANY", "i.updated_at = c.updated_at", "pg_stat_activity")
PROFILE_STATEMENTS, PROFILE_FUNCTIONS = 3, 3  # what the doc shows of the last tree; bench/out keeps the rest


STATEMENT_STATS = {
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track": "all",
    "pg_stat_statements.max": "20000",
    "pg_stat_statements.track_planning": "on",
}


def configure_postgres(services: Any, options: dict[str, str]) -> None:
    """Server settings of the throw-away cluster (ALTER SYSTEM, then a restart); with `STATEMENT_STATS`,
    pg_stat_statements (every level, planning too) is created too."""
    if not options:
        return
    with psycopg.connect(services.dsn, autocommit=True) as conn:
        for name, value in options.items():
            setting = sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(*name.split(".")), sql.Literal(value))
            conn.execute(setting)
    services.pg.stop()
    services.pg.start()
    if "shared_preload_libraries" in options:
        with psycopg.connect(services.dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")


def server_options(args: argparse.Namespace) -> dict[str, str]:
    return {"shared_buffers": args.shared_buffers} if args.shared_buffers else {}


def statement_profile(dsn: str, reports: int) -> list[dict[str, Any]]:
    """Every statement since the last reset, per accepted report: calls and ms (execution + planning)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT toplevel, calls, total_exec_time + total_plan_time, rows, "
            "regexp_replace(query, '\\s+', ' ', 'g') FROM pg_stat_statements "
            "WHERE query NOT LIKE '%%pg_stat_statements%%' ORDER BY 3 DESC"
        ).fetchall()
    return [
        {
            "toplevel": bool(top),
            "calls_per_report": calls / reports,
            "ms_per_report": ms / reports,
            "rows_per_call": n / calls if calls else 0,
            "bench": any(b in query for b in BENCH_STATEMENTS),
            "query": query,
        }
        for top, calls, ms, n, query in rows
    ]


def py_spy(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    """py-spy (pip, the bench's only) sampling `pid` without pausing it, as collapsed stacks."""
    spy = Path(sys.executable).with_name("py-spy")
    return subprocess.Popen(
        [str(spy), "record", "--pid", str(pid), "--rate", "200", "--duration", str(int(seconds)), "--nonblocking",
         "--format", "raw", "--output", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _frame(raw: str) -> tuple[str, str]:
    """(`function (file)`, package) of one py-spy frame `function (path:line)`; py-spy's paths are relative to
    their package's root (`psycopg/_cursor_base.py`, `app/reports/service.py`, `asyncio/events.py`)."""
    func, _, where = raw.rpartition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0].removeprefix(str(ROOT) + "/")
    parts = path.split("/")
    package = "/".join(parts[:2]) if parts[0] in ("app", "jobs") and len(parts) > 2 else parts[0]
    return f"{func} ({path})", package.removesuffix(".py")


# frames every request or job passes through (the CLI, the middleware chain, the worker loop): not informative
_WRAPPERS = ("app/cli.py", "app/kernel/asgi.py", "Middleware.", "ForwardedHeaders.", "run_worker (", "_watched.")


def stack_profile(path: Path) -> dict[str, Any]:
    """Collapsed stacks: the share of samples in each of our functions (inclusive) and in each package (self)."""
    total = 0
    inclusive: dict[str, int] = {}
    own: dict[str, int] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            n = int(count)
            total += n
            frames = [_frame(f) for f in stack.split(";") if " (" in f]
            if not frames:
                continue
            ours = {name for name, package in frames if package.startswith(("app/", "jobs/"))}
            for name in {name for name in ours if not any(w in name for w in _WRAPPERS)}:
                inclusive[name] = inclusive.get(name, 0) + n
            own[frames[-1][1]] = own.get(frames[-1][1], 0) + n
    share = {k: v / total for k, v in inclusive.items()} if total else {}
    return {
        "samples": total,
        "inclusive": dict(sorted(share.items(), key=lambda kv: -kv[1])[:30]),
        "self_by_package": {k: v / total for k, v in sorted(own.items(), key=lambda kv: -kv[1])[:15]} if total else {},
    }


def profile_tree(
    env: dict[str, str],
    dsn: str,
    postmaster: int,
    tokens: list[str],
    cwd: Path,
    args: argparse.Namespace,
    seq: list[int],
    forge: Forge | None = None,
) -> dict[str, Any]:
    """1 web x 1 worker of `cwd`'s tree at `--profile` reports/s: a warm-up step, then a measured one with the
    statement statistics reset and py-spy on the web process and the worker."""
    procs: list[subprocess.Popen[bytes]] = []
    bench_backends = BenchBackends(dsn)
    try:
        bases, cpu = start_processes(env, dsn, postmaster, 1, 1, procs, bench_backends, cwd, forge)
        repos = listed_repositories(dsn)
        rate = args.profile
        commits = forge.commits if forge else None
        # warm: pools, caches, prepared plans
        uvloop.run(run_step(bases, tokens, repos, rate, 10, dsn, seq, cpu, commits))
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_statements_reset()")
        out = ROOT / "bench" / "out"
        out.mkdir(exist_ok=True)
        spies = [py_spy(procs[0].pid, args.step_seconds, out / "capacity_web.stacks"),
                 py_spy(procs[1].pid, args.step_seconds, out / "capacity_worker.stacks")]  # fmt: skip
        step = uvloop.run(run_step(bases, tokens, repos, rate, args.step_seconds, dsn, seq, cpu, commits))
        for spy in spies:
            spy.wait(timeout=60)
        row = step.row()
        print(f"  profile {cwd} @ {rate:.0f}/s: {json.dumps(row)}", flush=True)
        return {
            "tree": str(cwd),
            "commit": tree_name(cwd),
            "step": row,
            "statements": statement_profile(dsn, step.ok),
            "web": stack_profile(out / "capacity_web.stacks"),
            "worker": stack_profile(out / "capacity_worker.stacks"),
        }  # fmt: skip
    finally:
        bench_backends.stop()
        for proc in procs:
            stop(proc)


def tree_name(cwd: Path) -> str:
    """The tree's commit, or its directory's name when it is not a git checkout (a `git archive` copy)."""
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=cwd, capture_output=True, text=True, check=False)
    return out.stdout.strip() if out.returncode == 0 and cwd == ROOT else cwd.name


def run_profile(tier_name: str, args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"tier": tier_name, "rate": args.profile, "trees": [], "gate": args.gate,
                               "per_commit": args.per_commit}  # fmt: skip
    with throwaway_services("tarakan-capacity-profile-") as services:
        configure_postgres(services, {**STATEMENT_STATS, **server_options(args)})
        results["shared_buffers"] = args.shared_buffers
        dsn = services.dsn
        env, results["rows"] = prepared_tier(services, tier_name)
        env = over_socket(env, services, args)
        tokens = make_submitters(dsn, ACCOUNTS)
        seq = [0]
        assert services.pg.proc is not None
        pid = services.pg.proc.pid
        with gate_settings(env, dsn, args) as (env, forge):
            for tree in args.trees:
                results["trees"].append(profile_tree(env, dsn, pid, tokens, tree, args, seq, forge))
            results["load_average"] = os.getloadavg()
            if args.curve:  # the curve of the last tree on the same registry (statement statistics stay on)
                results["configs"] = [
                    run_config(env, dsn, pid, web, workers, tokens, args, seq, args.trees[-1], forge)
                    for web, workers in args.configs
                ]
    return results


def render_profile(r: dict[str, Any], command: str) -> str:
    """The profile's own section, rewritten whole by each run: the trees side by side when there are several, and
    the last tree's detail (its costliest statements, py-spy's top functions); the full lists stay in
    bench/out/capacity_profile.json."""
    lines = [PROFILE_HEADING, "", f"Command: `{command}`; load average at the end "
             f"{' / '.join(f'{x:.1f}' for x in r['load_average'])}. 1 web x 1 worker: a warm-up step, then one "
             "with pg_stat_statements and py-spy.", ""]  # fmt: skip
    if len(r["trees"]) > 1:
        lines += compare_trees(r["trees"])
    t = r["trees"][-1]
    step = t["step"]
    cpu = step["cpu_ms_per_report"]
    server = sum(cpu.get(k, 0) for k in ("web", "workers", "postgres"))
    calls, ms = _server_statements(t)
    lines += [
        f"Tree `{t['commit']}` at {r['rate']:.0f} reports/s for {step['achieved']:.1f}/s achieved: **CPU ms per "
        f"accepted report: web {cpu['web']:.1f}, worker {cpu['workers']:.1f}, Postgres {cpu['postgres']:.1f} (server "
        f"total {server:.1f})**"
        + (f"; the demo forge (apart, --gate) {cpu['forge']:.1f}" if "forge" in cpu else "")
        + f"; lag p50 / p95 {fmt(step['lag_p50_ms'])} / {fmt(step['lag_p95_ms'])} "
        f"ms. Server statements: {calls:.1f} a report, {ms:.2f} ms executing and planning.",
        "",
        "| Postgres statement (top level; nested in italics) | calls / report | ms / report | rows / call |",
        "|---|---|---|---|",
    ]
    for s in [s for s in t["statements"] if not s["bench"]][:PROFILE_STATEMENTS]:
        query = s["query"][:95].replace("|", "\\|")
        query = f"`{query}`" if s["toplevel"] else f"*`{query}`*"
        lines.append(f"| {query} | {s['calls_per_report']:.2f} | {s['ms_per_report']:.3f} | "
                     f"{s['rows_per_call']:.1f} |")  # fmt: skip
    lines.append("")
    for proc in ("web", "worker"):
        p = t[proc]
        incl = ", ".join(f"{k} {v * 100:.0f} %" for k, v in list(p["inclusive"].items())[:PROFILE_FUNCTIONS])
        own = ", ".join(f"{k} {v * 100:.0f} %" for k, v in list(p["self_by_package"].items())[:PROFILE_FUNCTIONS])
        lines.append(f"- py-spy, {proc} ({p['samples']:,} samples): {incl}; self time: {own}.")
    return "\n".join(lines) + "\n"


def _server_statements(t: dict[str, Any]) -> tuple[float, float]:
    top = [s for s in t["statements"] if s["toplevel"] and not s["bench"]]
    return sum(s["calls_per_report"] for s in top), sum(s["ms_per_report"] for s in top)


def compare_trees(trees: list[dict[str, Any]]) -> list[str]:
    """The trees side by side (first and last), per accepted report, with the ratio last / first."""
    first, last = trees[0], trees[-1]

    def figures(t: dict[str, Any]) -> dict[str, float]:
        cpu = t["step"]["cpu_ms_per_report"]
        calls, ms = _server_statements(t)
        return {
            "web CPU ms": cpu["web"],
            "worker CPU ms": cpu["workers"],
            "Postgres CPU ms": cpu["postgres"],
            "server CPU ms (web + worker + Postgres)": cpu["web"] + cpu["workers"] + cpu["postgres"],
            "bench's own Postgres CPU ms (apart)": cpu.get("bench_postgres", 0.0),
            "bench client CPU ms (apart)": cpu.get("client", 0.0),
            "server statements, top level": calls,
            "server statements, ms executing and planning": ms,
        }

    a, b = figures(first), figures(last)
    lines = [f"| per accepted report | `{first['commit']}` | `{last['commit']}` | ratio |", "|---|---|---|---|"]
    for name in a:
        ratio = f"{b[name] / a[name]:.2f}" if a[name] else "–"
        lines.append(f"| {name} | {a[name]:.1f} | {b[name]:.1f} | {ratio} |")
    lines.append(
        f"| lag p50 / p95 ms | {fmt(first['step']['lag_p50_ms'])} / {fmt(first['step']['lag_p95_ms'])} | "
        f"{fmt(last['step']['lag_p50_ms'])} / {fmt(last['step']['lag_p95_ms'])} | |"
    )
    return [*lines, ""]


def kept_notes(heading: str = HEADING) -> str:
    """The section's `###` subsections (notes by hand on what the profiles found, which the code cites by name):
    a new curve replaces the text above them and keeps them as they are."""
    path = ROOT / "docs" / "benchmarks.md"
    text = path.read_text() if path.exists() else ""
    section = text.find(heading + "\n")
    if section < 0:
        return ""
    end = text.find("\n## ", section + len(heading))
    body = text[section : end if end >= 0 else len(text)]
    first = body.find("\n### ")
    return "" if first < 0 else body[first + 1 :].rstrip()


def fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"


def f1(value: float | None) -> str:
    return "–" if value is None else f"{value:,.1f}"


def capacity(c: dict[str, Any]) -> float | None:
    """The bench's own figure of a configuration: the highest achieved rate of a step with no knee."""
    good = [s["achieved"] for s in c["steps"] if not s["knee"]]
    return max(good) if good else None


def render(r: dict[str, Any], command: str, step_seconds: float) -> str:
    gate = bool(r.get("gate"))
    bench_kinds = ("bench_postgres", "client", "forge") if gate else ("bench_postgres", "client")
    method = (
        f'Command: `{command}`. As in "Ingest capacity" (the same reports, {step_seconds:.0f} s steps and knee), '
        "with `EVIDENCE_CHECK=gate` against the loopback demo forge (its own process, CPU apart): "
        f"{r.get('per_commit')} reports a commit, {FILES_PER_COMMIT} files a commit; a finding not confirmed at "
        "submission puts the step past the knee."
        if gate
        else f"Command: `{command}`. Open-loop one-finding reports from {ACCOUNTS} accounts through `POST "
        "/api/v1/repos/.../reports` to real `tarakan serve` and `tarakan worker` processes, half on shared patterns; "
        f"each rate held {step_seconds:.0f} s, stepping up until it is not "
        "achieved (< 90 %) or two steps are past the knee (lag p95 > 1 s, or errors). Lag: the 2xx answer to the "
        "canonical in the atlas. CPU ms per accepted report. Evidence gate off (`EVIDENCE_CHECK=off`)."
    )
    registry = (
        f"Registry: Tier {r['tier']}: {r['rows']['repositories']:,} repositories, "
        f"{r['rows']['canonical_findings']:,} canonical findings before the run."
    )
    lines = [GATE_HEADING if gate else HEADING, "", method, "", *([] if gate else [registry, ""])]
    if gate:
        figures = [f for f in (capacity(c) for c in r["configs"]) if f is not None]
        # the line the bar reads, alone: whole reports/s (the best configuration's figure, rounded)
        lines.append(f"Ingest capacity with the evidence gate on: {round(max(figures)) if figures else 0} reports/s")
    else:
        lines += [
            "| web x workers | capacity (highest step with lag p95 <= 1 s and no error: the figure that counts) |",
            "|---|---|",
        ]
        for c in r["configs"]:
            figure = capacity(c)
            best = f"{figure:,.1f} reports/s" if figure is not None else "below the first step"
            lines.append(f"| {c['web']} x {c['workers']} ({c['web_mode']}) | {best} |")
    bench_names = " / ".join(k.removeprefix("bench_").replace("postgres", "Postgres") for k in bench_kinds)
    lines += [
        "",
        "| web x workers | target /s | achieved /s | lag p50 / p95 ms | request p50 / p95 ms | 429/503/other "
        f"errors | CPU ms per report: web / workers / Postgres | bench's own: {bench_names} | knee |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in r["configs"]:
        for s in c["steps"]:
            st = s["statuses"]
            other = sum(v for k, v in st.items() if k not in ("200", "201", "429", "503")) + s["skipped"]
            cpu = s.get("cpu_ms_per_report") or {}
            per_report = " / ".join(f1(cpu.get(k)) for k in ("web", "workers", "postgres")) if cpu else "–"
            bench = " / ".join(f1(cpu.get(k)) for k in bench_kinds) if cpu else "–"
            lines.append(
                f"| {c['web']} x {c['workers']} | {s['target']:,.0f} | {s['achieved']:,.1f} | "
                f"{fmt(s['lag_p50_ms'])} / {fmt(s['lag_p95_ms'])} | {fmt(s['request_p50_ms'])} / "
                f"{fmt(s['request_p95_ms'])} | {st.get('429', 0)}/{st.get('503', 0)}/{other} | {per_report} | {bench} | "
                f"{s['knee'] or ''} |"
            )
    for c in r["configs"]:
        if "cold" in c:
            s = c["cold"]
            lines += ["", f"Cold start ({c['web']} x {c['workers']}: the processes started anew, then at once "
                      f"{s['target']:,.0f}/s): {s['achieved']:,.1f}/s achieved, request p50 / p95 "
                      f"{fmt(s['request_p50_ms'])} / {fmt(s['request_p95_ms'])} ms, lag p95 {fmt(s['lag_p95_ms'])} ms, "
                      f"{s['skipped']} skipped{'; ' + s['knee'] if s['knee'] else ''}."]  # fmt: skip
    kept = kept_notes(GATE_HEADING if gate else HEADING)
    return "\n".join(lines) + (f"\n\n{kept}" if kept else "")


def parse_config(raw: str) -> tuple[int, int]:
    web, _, workers = raw.partition("x")
    return int(web), int(workers)


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--step-seconds", type=float, default=20)
    parser.add_argument("--start-rate", type=float, default=10)
    parser.add_argument("--factor", type=float, default=1.5)
    parser.add_argument("--max-rate", type=float, default=1000)
    parser.add_argument(
        "--configs", type=lambda v: [parse_config(x) for x in v.split(",")], default=list(CONFIGS),
        help="web x workers, e.g. 1x1,2x2",
    )  # fmt: skip
    parser.add_argument("--profile", type=float, help="profile 1 web x 1 worker at this rate instead of the curve")
    parser.add_argument(
        "--trees", type=lambda v: [Path(x).resolve() for x in v.split(",")], default=[ROOT],
        help="with --profile: source trees to profile in turn on one registry (e.g. a git worktree of the baseline)",
    )  # fmt: skip
    parser.add_argument(
        "--shared-buffers", metavar="SIZE",
        help="Postgres shared_buffers of the run (e.g. 2GB); default: Postgres's own (128MB)",
    )  # fmt: skip
    parser.add_argument("--label", default="now", help="ignored: kept so older commands still run")
    parser.add_argument("--curve", action="store_true", help="with --profile: then the curve of the last tree")
    parser.add_argument(
        "--gate", action="store_true",
        help="the evidence gate on, against the loopback demo forge (a process; its CPU apart); default: gate off",
    )  # fmt: skip
    parser.add_argument("--per-commit", type=int, default=20, help="with --gate: reports citing each commit")
    parser.add_argument(
        "--unix-socket", action="store_true", help="web and workers reach Postgres over its Unix socket, not TCP"
    )
    parser.add_argument("--rerender", metavar="COMMAND", help="with --profile: write bench/out's last results again")
    parser.add_argument(
        "--cold-start", action="store_true",
        help="after each curve, restart its processes and hold its capacity's rate at once for one step",
    )  # fmt: skip
    parser.add_argument(
        "--cold-rate", type=float, metavar="RATE", help="with --cold-start: hold this rate instead of the capacity's"
    )
    args = parser.parse_args()
    if args.profile:
        command = args.rerender or " ".join(["python -m bench.capacity_bench", *sys.argv[1:]])
        saved = ROOT / "bench" / "out" / "capacity_profile.json"
        if args.rerender:
            results = json.loads(saved.read_text())
        else:
            results = run_profile(args.tier, args)
            saved.write_text(json.dumps(results, indent=2) + "\n")
        markdown = render_profile(results, command)
        print(markdown)
        if results.get("configs"):
            curve = render(results, command, args.step_seconds)
            print(curve)
            if not args.no_write:
                write_section(curve, GATE_HEADING if args.gate else HEADING)
        if not args.no_write:
            write_section(markdown, PROFILE_HEADING)
        return 0
    heading = GATE_HEADING if args.gate else HEADING
    name = "capacity_gate" if args.gate else "capacity"
    results = run(args.tier, args)
    publish(name, results, lambda r, command: render(r, command, args.step_seconds), heading, args,
            " ".join(["python -m bench.capacity_bench", *sys.argv[1:]]))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
