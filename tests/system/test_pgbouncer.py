"""The fleet through a real PgBouncer in transaction mode (docs/scaling.md "PgBouncer in transaction mode").

Debian's `pgbouncer` (root must name a user with `-u`) pools the test session's Postgres with a few server
connections; in front of it run server A (`tarakan serve --workers 2`: two processes on one port), server B (one
process, with a short statement timeout) and two workers, all with `DB_TRANSACTION_POOLING=1`. Consecutive
transactions of one client land on different server connections, so anything that kept state on a connection
(a startup option, a session `SET`, a session advisory lock, a prepared statement) would break here:

- sessions: a login on A is valid on B, a same-origin form (a quarantine) is accepted and a cross-origin one
  refused, a logout on B ends the session on A; parallel wrong passwords on both servers stop at the limit
  (counted under a transaction advisory lock);
- the quarantine is seen at the next anonymous request by both of A's processes, which had both served the
  status-filtered list (the read-time guard runs in every process at every request);
- a burst of reports on both servers is fully projected after the workers drain the dirty-key queue, and the
  instance ledger paged with keyset cursors alternately on A and B lists every instance once;
- the hourly and nightly singletons (leases and slots) triggered three times each run once;
- B's statement timeout holds (a 503 after it, not a hang), and /metrics on A counts the requests both of its
  processes served;
- PgBouncer really carried it: every transaction above went through at most POOL_SIZE server connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from sqlalchemy.engine import make_url

from app.accounts.service import create_account, create_token
from app.accounts.sessions import COOKIE_NAME
from app.devservices import free_port, pdeathsig
from app.infestations.queries import list_infestations_rollup
from app.infestations.shadow import shadow_compare_all
from e2e.seed import seed_pattern
from tests import factories
from tests.harness import spawn, stop
from tests.sql import get_while_locked, rows, scalar
from tests.system.support import (
    BURST,
    PASSWORD,
    REPOSITORIES,
    TITLES,
    WORKER_ENV,
    eventually,
    no_dirty_key,
    run_singletons_three_times,
    submit_burst,
)

POOL_SIZE = 4  # server connections for every process together: far fewer than the clients
STATEMENT_TIMEOUT = 2  # server B's DB_STATEMENT_TIMEOUT, seconds
NOTES = "Quarantined while its history is checked."
OPEN = "/infestations.json?status=open&days=365"

CONFIG = """\
[databases]
{database} = host={host} port={port} dbname={database}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen_port}
unix_socket_dir =
auth_type = trust
auth_file = {directory}/userlist.txt
admin_users = {user}
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = 1000
query_wait_timeout = 30
log_connections = 0
log_disconnections = 0
logfile =
pidfile =
"""


@contextlib.contextmanager
def pgbouncer(database_url: str, log: Path) -> Iterator[str]:
    """PgBouncer (transaction pooling) in front of `database_url`; yields the URL to connect through it."""
    target = make_url(database_url)
    listen_port = free_port()
    with tempfile.TemporaryDirectory(prefix="tarakan-pgbouncer-") as tmp:
        directory = Path(tmp)
        directory.chmod(0o755)  # pgbouncer drops to `nobody`, which must read its files
        (directory / "userlist.txt").write_text(f'"{target.username}" ""\n')
        config = directory / "pgbouncer.ini"
        config.write_text(
            CONFIG.format(
                database=target.database, host=target.host, port=target.port, listen_port=listen_port,
                directory=directory, user=target.username, pool_size=POOL_SIZE,
            )
        )  # fmt: skip
        for path in directory.iterdir():
            path.chmod(0o644)
        as_user = ["-u", "nobody"] if os.geteuid() == 0 else []  # it refuses to run as root
        binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [binary, *as_user, str(config)], stdout=out, stderr=subprocess.STDOUT,
                preexec_fn=pdeathsig(signal.SIGTERM),
            )  # fmt: skip
        try:
            deadline = time.monotonic() + 10
            while True:
                assert proc.poll() is None, f"pgbouncer exited:\n{log.read_text(errors='replace')}"
                try:
                    socket.create_connection(("127.0.0.1", listen_port), timeout=1).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "pgbouncer did not listen"
                    time.sleep(0.05)
            yield target.set(host="127.0.0.1", port=listen_port).render_as_string(hide_password=False)
        finally:
            stop(proc, signal.SIGTERM)  # immediate shutdown


def admin(url: str, command: str) -> list[dict[str, Any]]:
    """A PgBouncer console command (`SHOW POOLS`...); the console speaks only the simple query protocol."""
    bouncer = make_url(url)
    conninfo = f"host={bouncer.host} port={bouncer.port} user={bouncer.username} dbname=pgbouncer"
    with psycopg.connect(conninfo, autocommit=True, cursor_factory=psycopg.ClientCursor) as conn:
        cursor = conn.execute(command)
        names = [c.name for c in cursor.description or []]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


@dataclass
class Fleet:
    bouncer: str
    a: str = ""  # two processes
    b: str = ""  # one process, short statement timeout
    metrics_dir: Path = Path()
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    worker_logs: list[Path] = field(default_factory=list)


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def fresh_client(base: str) -> httpx.AsyncClient:
    """No keep-alive: every request is a new connection, so the kernel hands it to either of A's processes."""
    return httpx.AsyncClient(base_url=base, timeout=30, limits=httpx.Limits(max_keepalive_connections=0))


@pytest.fixture(scope="module")
def fleet(services: dict[str, str]) -> Iterator[Fleet]:
    with tempfile.TemporaryDirectory(prefix="tarakan-bounced-") as tmp:
        logs = Path(tmp)
        with pgbouncer(services["DATABASE_URL"], logs / "pgbouncer.log") as url:
            fleet = Fleet(bouncer=url, metrics_dir=logs / "metrics-a")
            fleet.metrics_dir.mkdir()  # prometheus-client wants it to exist
            env = {"DATABASE_URL": url, "DATABASE_REPLICA_URL": url, "DB_TRANSACTION_POOLING": "1"}
            try:
                for name, workers, extra in (
                    ("a", "2", {"PROMETHEUS_MULTIPROC_DIR": str(fleet.metrics_dir)}),
                    ("b", "1", {"DB_STATEMENT_TIMEOUT": str(STATEMENT_TIMEOUT)}),
                ):
                    base = f"http://127.0.0.1:{free_port()}"
                    fleet.procs.append(
                        spawn("serve", "--port", base.rsplit(":", 1)[1], "--workers", workers,
                              env={**env, **extra, "BASE_URL": base}, log=logs / f"serve-{name}.log")
                    )  # fmt: skip
                    setattr(fleet, name, base)
                for n in range(2):
                    fleet.worker_logs.append(logs / f"worker-{n}.log")
                    fleet.procs.append(spawn("worker", env={**env, **WORKER_ENV}, log=fleet.worker_logs[-1]))
                deadline = time.monotonic() + 60  # five processes start at once on a busy machine
                while not (
                    all("rollup worker" in log.read_text(errors="replace") for log in fleet.worker_logs)
                    and all(answers(f"{base}/healthz") for base in (fleet.a, fleet.b))
                ):
                    assert all(p.poll() is None for p in fleet.procs), "a process of the fleet exited"
                    assert time.monotonic() < deadline, "the fleet did not start"
                    time.sleep(0.05)
                yield fleet
            finally:
                for proc in reversed(fleet.procs):
                    stop(proc, signal.SIGTERM, timeout=15)
                for log in sorted(logs.glob("*.log")):  # shown by pytest when a test failed
                    print(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}")


# --- sessions, forms, login limits, and a takedown seen by every process ---------------------------------------------


async def test_sessions_forms_login_limits_and_a_takedown_across_processes(fleet: Fleet) -> None:
    await create_account(
        "mod@example.com", "mod", platform_role="moderator", trust_tier="reviewer", state="active", password=PASSWORD
    )
    await create_account("member@example.com", "member", state="active", password=PASSWORD)
    seeded = await seed_pattern("Hardcoded secret in config", repos=2)

    async with fresh_client(fleet.a) as on_a, fresh_client(fleet.b) as on_b:
        # parallel wrong passwords on both servers: the per-account limit (5 per address) holds exactly
        guesses = await asyncio.gather(
            *(
                client.post(
                    "/login", data={"email": "member@example.com", "password": "guess"}, headers={"Origin": base}
                )
                for i in range(9)
                for client, base in [((on_a, fleet.a), (on_b, fleet.b))[i % 2]]
            )
        )
        assert sorted(g.status_code for g in guesses) == [401] * 5 + [429] * 4

        # both of A's processes serve the anonymous status list
        before = await asyncio.gather(*(on_a.get(OPEN) for _ in range(12)))
        assert all(r.status_code == 200 and r.json()["items"][0]["sample_occurrence_public_id"] for r in before)

        login = await on_a.post(
            "/login", data={"email": "mod@example.com", "password": PASSWORD}, headers={"Origin": fleet.a}
        )
        assert login.status_code == 303, login.text
        session = {"Cookie": f"{COOKIE_NAME}={login.cookies[COOKIE_NAME]}"}
        assert (await on_b.get("/moderation", headers=session)).status_code == 200

        sample = before[0].json()["items"][0]["sample_occurrence_public_id"]
        repository_id = await scalar(
            "SELECT s.repository_id FROM scan_findings f JOIN scans s ON s.id = f.scan_id "
            "WHERE f.public_id = CAST(:id AS uuid)",
            id=sample,
        )
        [repo] = [r for r in seeded.repositories if r.id == repository_id]
        form = {"listing_status": "quarantined", "reason": "malware", "notes": NOTES}
        listing = f"/moderation/repos/{repo.host}/{repo.owner}/{repo.name}/listing"
        foreign = await on_b.post(listing, data=form, headers={**session, "Origin": "https://evil.example"})
        assert foreign.status_code == 403 and "cross-origin" in foreign.text
        accepted = await on_b.post(listing, data=form, headers={**session, "Origin": fleet.b})
        assert accepted.status_code == 303, accepted.text

        # the next anonymous requests, whichever of A's processes answers, no longer show the quarantined sample
        # (a worker's refresh may already have dropped the pattern: one listed repository is not an infestation)
        after = await asyncio.gather(*(on_a.get(OPEN) for _ in range(12)))
        shown = [r.json()["items"] for r in after]
        assert all(items == [] or items[0]["sample_occurrence_public_id"] is None for items in shown), shown

        assert (await on_b.post("/logout", headers={**session, "Origin": fleet.b})).status_code == 303
        for _ in range(4):  # either process of A
            assert (await on_a.get("/moderation", headers=session)).status_code == 303


# --- the dirty-key queue, drains and keyset cursors -------------------------------------------------------------------


async def test_a_burst_on_both_servers_is_drained_and_paged_with_cursors(fleet: Fleet) -> None:
    agent = await create_account("agent@example.com", "agent", platform_role="moderator", state="active")
    bearer = {"Authorization": f"Bearer {await create_token(agent.id, ['findings:submit'])}"}
    repos = [await factories.create_repository() for _ in range(REPOSITORIES)]
    servers = [fleet.a, fleet.b]

    await submit_burst(servers, bearer, repos)
    await eventually(no_dirty_key, timeout=30, what="the workers drain every dirty key")
    assert await shadow_compare_all() == []
    listed = await list_infestations_rollup(days=30, min_repos=2, limit=40)
    assert sum(item["instance_count"] for item in listed) == BURST * 2

    # a ledger of 130 instances, 50 a page, each page asked from the other server
    seeded = await seed_pattern("XML external entity", repos=3, instances=130)
    seen: list[int] = []
    cursor: str | None = None
    async with httpx.AsyncClient(timeout=30) as http:
        for page in range(10):
            params = {"cursor": cursor} if cursor else {}
            response = await http.get(f"{servers[page % 2]}/infestations/{seeded.key}/instances.json", params=params)
            assert response.status_code == 200, response.text[:200]
            seen += [entry["id"] for entry in response.json()["entries"]]
            cursor = response.json()["next_cursor"]
            if cursor is None:
                break
    assert page == 2
    expected = await scalar("SELECT count(*) FROM infestation_pattern_instances WHERE pattern_key = :k", k=seeded.key)
    assert len(seen) == len(set(seen)) == expected == 130


# --- singletons ---------------------------------------------------------------------------------------------------------


async def test_hourly_and_nightly_jobs_run_once_per_slot_through_pgbouncer(fleet: Fleet) -> None:
    await seed_pattern(TITLES[0], repos=2)
    slot = (datetime.now(UTC) + timedelta(hours=1)).replace(minute=0, second=0, microsecond=0).isoformat()
    results = await run_singletons_three_times(slot)
    assert results == {"recompute_windows_job": [False, False, True], "reconcile_job": [False, False, True]}
    # (other singletons, such as the export a takedown asks for, may have run meanwhile: only these two count)
    done = await rows(
        "SELECT name, detail FROM job_runs WHERE name IN ('recompute_windows', 'reconcile') AND finished_at IS NOT NULL"
    )
    assert sorted((r["name"], json.loads(r["detail"])["state"]) for r in done) == [
        ("recompute_windows", "done"),
        ("reconcile", "done"),
    ]


# --- statement timeout, metrics of both processes, and PgBouncer's own account ------------------------------------


def requests_counted(exposition: str, route: str) -> float:
    pattern = rf'^tarakan_http_requests_total{{method="GET",route="{re.escape(route)}",status="2xx"}} (\S+)$'
    found = re.search(pattern, exposition, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def per_process_counts(metrics_dir: Path, route: str) -> list[float]:
    """What each of A's processes counted, read from its own file."""
    counts = []
    for path in sorted(metrics_dir.glob("counter_*.db")):
        with tempfile.TemporaryDirectory() as alone:
            shutil.copy(path, alone)
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=alone)  # type: ignore[no-untyped-call]
            counts.append(
                sum(
                    sample.value
                    for metric in registry.collect()
                    for sample in metric.samples
                    if sample.name == "tarakan_http_requests_total"
                    and sample.labels == {"method": "GET", "route": route, "status": "2xx"}
                )
            )
    return counts


async def test_statement_timeout_metrics_and_pooling_hold(fleet: Fleet) -> None:
    await seed_pattern("Hardcoded secret in config", repos=2)
    # B's cap is a SET LOCAL in every transaction: a statement waiting on a lock is cancelled, and answers 503
    async with fresh_client(fleet.b) as on_b:
        response, waited = await get_while_locked(on_b, OPEN, "infestation_pattern_status_windows")
    assert response.status_code == 503, response.text[:200]
    assert STATEMENT_TIMEOUT - 0.5 < waited < STATEMENT_TIMEOUT + 3

    async with fresh_client(fleet.a) as on_a:
        start = requests_counted((await on_a.get("/metrics")).text, "/healthz")
        answers = await asyncio.gather(*(on_a.get("/healthz") for _ in range(60)))
        assert {r.status_code for r in answers} == {200}
        total = requests_counted((await on_a.get("/metrics")).text, "/healthz")
    assert total - start == 60
    counts = per_process_counts(fleet.metrics_dir, "/healthz")
    assert len(counts) == 2 and all(c > 0 for c in counts), f"both processes served: {counts}"
    assert sum(counts) == total

    def ours(command: str) -> list[dict[str, Any]]:
        return [row for row in admin(fleet.bouncer, command) if row["database"] != "pgbouncer"]

    assert len(ours("SHOW SERVERS")) <= POOL_SIZE
    assert len(ours("SHOW CLIENTS")) > POOL_SIZE, "more client connections than server connections"
    transactions = sum(int(row["total_xact_count"]) for row in ours("SHOW STATS"))
    assert transactions > 100, "the fleet's transactions went through PgBouncer"
