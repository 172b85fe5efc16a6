"""N instances on one Postgres and one Redis (docs/scaling.md), with real processes: two `tarakan serve`
on different ports and two `tarakan worker`, all on the test session's embedded Postgres and Valkey.

- a session opened on one server is valid on the other (and revoked everywhere by a logout on either);
- a burst of reports spread over both servers is fully projected after the workers drain: no dirty key left and
  the rollup read equals the legacy read for every window x status;
- the hourly and nightly singletons triggered on both workers for one slot run once;
- a worker SIGKILLed in the middle of a refresh loses nothing: the survivor takes the key over once the claim
  expires, and the rollups equal a recomputation.

The workers run with `INFESTATIONS_CLAIM_SECONDS=3` (a dead worker's claim expires quickly) and
`INFESTATIONS_HOT_KEY_INTERVAL=1` (a key re-dirtied during its refresh is retried after 1 s instead of 30 s, so the
burst settles within the test's bounded wait).
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.accounts.service import create_account, create_token
from app.accounts.sessions import COOKIE_NAME
from app.devservices import free_port
from app.infestations import projection
from app.infestations.queries import list_infestations_rollup
from app.infestations.shadow import shadow_compare, shadow_compare_all
from app.kernel import db, queue
from app.record import outbox
from app.reports.finding_memory import pattern_key
from tests import factories
from tests.harness import spawn, stop, wait_http
from tests.sql import execute, scalar
from tests.system.support import (
    BIG_KEY,
    BIG_PER_REPOSITORY,
    BIG_REPOSITORIES,
    BURST,
    PASSWORD,
    REPOSITORIES,
    TITLES,
    WORKER_ENV,
    build_big_pattern,
    dirty_count,
    eventually,
    no_dirty_key,
    run_singletons_three_times,
    submit_burst,
)


class Fleet:
    """Two web servers and two workers; a worker that died (or was killed by a test) is replaced on demand."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.servers: list[str] = []
        self._server_procs: list[subprocess.Popen[bytes]] = []
        self.workers: list[subprocess.Popen[bytes]] = []
        self._logs: dict[int, Path] = {}

    def start_server(self) -> None:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        self._server_procs.append(spawn("serve", "--port", str(port), env={"BASE_URL": base}))
        self.servers.append(base)

    def start_worker(self) -> subprocess.Popen[bytes]:
        log = self.logs / f"worker-{len(self._logs) + 1}.log"
        proc = spawn("worker", env=WORKER_ENV, log=log)
        self._logs[proc.pid] = log
        self.workers.append(proc)
        return proc

    def worker_log(self, proc: subprocess.Popen[bytes]) -> str:
        return self._logs[proc.pid].read_text(errors="replace")

    def wait_workers_ready(self, timeout: float = 30) -> None:
        """Every live worker ran its arq startup (it logs its worker id), so it is polling the queue."""
        deadline = time.monotonic() + timeout
        for proc in self.workers:
            while "rollup worker" not in self.worker_log(proc):
                assert proc.poll() is None, f"worker {proc.pid} exited:\n{self.worker_log(proc)}"
                assert time.monotonic() < deadline, f"worker {proc.pid} did not start:\n{self.worker_log(proc)}"
                time.sleep(0.05)

    def ensure_workers(self) -> None:
        self.workers = [p for p in self.workers if p.poll() is None]
        while len(self.workers) < 2:
            self.start_worker()
        self.wait_workers_ready()

    def worker_by_pid(self, pid: int) -> subprocess.Popen[bytes]:
        return next(p for p in self.workers if p.pid == pid)

    def stop(self) -> None:
        for proc in self.workers:
            stop(proc, signal.SIGTERM, timeout=15)
        for proc in self._server_procs:
            stop(proc, signal.SIGINT, timeout=15)


@pytest.fixture(scope="module")
def fleet_processes(services: dict[str, str]) -> Iterator[Fleet]:
    with tempfile.TemporaryDirectory(prefix="tarakan-fleet-") as logs:
        fleet = Fleet(Path(logs))
        try:
            for _ in range(2):
                fleet.start_server()
            for _ in range(2):
                fleet.start_worker()
            for base in fleet.servers:
                wait_http(f"{base}/healthz")
            fleet.wait_workers_ready()
            yield fleet
        finally:
            fleet.stop()


@pytest.fixture
def fleet(fleet_processes: Fleet) -> Fleet:
    fleet_processes.ensure_workers()
    return fleet_processes


# --- sessions -----------------------------------------------------------------------------------------------------


async def test_a_login_on_one_server_is_valid_on_the_other(fleet: Fleet) -> None:
    await create_account(
        "mod@example.com", "mod", platform_role="moderator", trust_tier="reviewer", state="active", password=PASSWORD
    )
    a, b = fleet.servers
    # separate clients: nothing is carried from one server to the other except what we pass explicitly
    async with httpx.AsyncClient(base_url=a) as on_a, httpx.AsyncClient(base_url=b) as on_b:
        login = await on_a.post(
            "/login", data={"email": "mod@example.com", "password": PASSWORD}, headers={"Origin": a}
        )
        assert login.status_code == 303, login.text
        assert login.headers["location"] == "/moderation"
        session = {"Cookie": f"{COOKIE_NAME}={login.cookies[COOKIE_NAME]}"}

        anonymous = await on_b.get("/moderation")
        assert anonymous.status_code == 303 and anonymous.headers["location"].startswith("/login")
        console = await on_b.get("/moderation", headers=session)
        assert console.status_code == 200, console.text
        # the session of A is the signed-in moderator on B ("mod" alone is on every console page)
        assert "@mod (moderator)" in console.text

        logout = await on_b.post("/logout", headers={**session, "Origin": b})
        assert logout.status_code == 303
        after = await on_a.get("/moderation", headers=session)
        assert after.status_code == 303, "a logout on B must end the session on A too"


# --- burst of reports -----------------------------------------------------------------------------------------------


async def test_a_burst_of_reports_on_both_servers_is_fully_reflected_after_the_drain(fleet: Fleet) -> None:
    # a moderator: exempt from the per-minute report limits, so the whole burst is accepted
    agent = await create_account("agent@example.com", "agent", platform_role="moderator", state="active")
    bearer = {"Authorization": f"Bearer {await create_token(agent.id, ['findings:submit'])}"}
    repos = [await factories.create_repository() for _ in range(REPOSITORIES)]

    await submit_burst(fleet.servers, bearer, repos)

    await eventually(no_dirty_key, timeout=30, what="the workers drain every dirty key")
    assert await shadow_compare_all() == []

    # and the rollups are not trivially equal: every title spans the repositories its reports went to
    expected: dict[str, set[int]] = {}
    for i in range(BURST):
        for n in range(2):
            expected.setdefault(pattern_key(TITLES[(i + n) % len(TITLES)]), set()).add(repos[i % REPOSITORIES].id)
    listed = await list_infestations_rollup(days=30, min_repos=2, limit=40)
    assert {item["pattern_key"]: item["repo_count"] for item in listed} == {k: len(v) for k, v in expected.items()}
    assert sum(item["instance_count"] for item in listed) == BURST * 2
    assert await dirty_count() == 0


# --- singletons -----------------------------------------------------------------------------------------------------


async def test_hourly_and_nightly_jobs_triggered_on_both_workers_run_once_per_slot(fleet: Fleet) -> None:
    reporter = await factories.create_account()
    for _ in range(2):
        await factories.create_instance(await factories.create_repository(), reporter, TITLES[0])
    await projection.refresh_pattern(pattern_key(TITLES[0]))
    # the slot the next hourly cron run stands for (a cron firing during the test shares it)
    slot = (datetime.now(UTC) + timedelta(hours=1)).replace(minute=0, second=0, microsecond=0).isoformat()
    # Three triggers per job for one slot, all due at the same instant (as when every worker's cron fires on
    # time): a worker takes up to max_jobs=4 due jobs at once, so at least two triggers of one job run
    # concurrently inside one worker, and the other worker takes what is left.
    results = await run_singletons_three_times(slot)
    logs = "\n".join(fleet.worker_log(p) for p in fleet.workers)
    assert results == {"recompute_windows_job": [False, False, True], "reconcile_job": [False, False, True]}, logs

    async with db.read_session(replica=False) as session:
        runs = {
            r.name: r
            for r in await session.execute(
                # the drain's progress record is written by any worker that refreshed a key, the export cron
                # builds the fleet's first export on its own schedule, the evidence re-check and earned trust run
                # every few seconds, the pending-metadata sweep every five minutes of the clock: none is a job this
                # test triggered
                text(
                    "SELECT name, holder, finished_at, detail FROM job_runs WHERE name NOT IN"
                    " ('drain', 'export', 'evidence_recheck', 'trust_refresh', 'metadata_pending')"
                )
            )
        }
    assert set(runs) == {"recompute_windows", "reconcile"}
    worker_pids = {p.pid for p in fleet.workers}
    for run in runs.values():
        detail = json.loads(run.detail)
        assert (detail["state"], datetime.fromisoformat(detail["slot"])) == ("done", datetime.fromisoformat(slot))
        assert run.finished_at is not None
        assert int(run.holder.split(":")[1]) in worker_pids, "ran in one of the worker processes"
    assert json.loads(runs["recompute_windows"].detail)["result"] == {"patterns": 1}
    assert json.loads(runs["reconcile"].detail)["result"]["source_keys"] == 1


# --- a worker killed mid-refresh -----------------------------------------------------------------------------------


async def projection_rows(key: str) -> dict[str, list[tuple[Any, ...]]]:
    """Everything projected for `key`, without the bookkeeping timestamps a refresh rewrites by design."""
    queries = {
        "pattern": "SELECT * FROM infestation_patterns WHERE pattern_key = :k",
        "repos": "SELECT * FROM infestation_pattern_repos WHERE pattern_key = :k ORDER BY repository_id",
        "instances": "SELECT * FROM infestation_pattern_instances WHERE pattern_key = :k ORDER BY canonical_finding_id",
    }
    skipped = {"refreshed_at", "updated_at", "inserted_at"}
    rows: dict[str, list[tuple[Any, ...]]] = {}
    async with db.read_session(replica=False) as session:
        for name, sql in queries.items():
            result = await session.execute(text(sql), {"k": key})
            keep = [i for i, column in enumerate(result.keys()) if column not in skipped or name == "instances"]
            rows[name] = [tuple(row[i] for i in keep) for row in result]
    return rows


async def _activity() -> str:
    """What every other database session is doing (a failure's explanation)."""
    async with db.read_session(replica=False) as session:
        rows = await session.execute(
            text(
                "SELECT pid, state, wait_event_type, wait_event, now() - xact_start AS age, left(query, 200) AS query "
                "FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
            )
        )
        return "\n".join(str(tuple(row)) for row in rows)


async def test_killing_a_worker_in_the_middle_of_a_refresh_loses_nothing(fleet: Fleet) -> None:
    reporter = await factories.create_account()
    await build_big_pattern(reporter.id)
    assert await projection.refresh_pattern(BIG_KEY) == BIG_REPOSITORIES * BIG_PER_REPOSITORY
    # a change the rollups have not seen yet: a third of the instances were fixed
    await execute(
        "UPDATE canonical_findings SET status = 'fixed', updated_at = now() WHERE pattern_key = :k AND id % 3 = 0",
        k=BIG_KEY,
    )
    assert await shadow_compare(days=30, min_repos=2, status="fixed") != [], "the comparison must see the stale rollup"

    async with db.transaction() as session:
        await outbox.mark_dirty(session, [BIG_KEY], "status")
    await outbox.schedule_refresh_after_commit()

    claimed_by: str | None = None
    deadline = time.monotonic() + 15
    while claimed_by is None:
        assert time.monotonic() < deadline, "no worker claimed the key"
        claimed_by = await scalar("SELECT claimed_by FROM infestation_dirty_keys WHERE pattern_key = :k", k=BIG_KEY)
        if claimed_by is None:
            await asyncio.sleep(0.01)
    victim = fleet.worker_by_pid(int(claimed_by.split(":")[1]))
    victim.send_signal(signal.SIGKILL)
    await asyncio.to_thread(victim.wait, 10)
    killed_at = await scalar("SELECT now()")

    # the refresh was really cut short: the key is still dirty, still claimed by the dead worker, rollup stale
    assert await scalar("SELECT claimed_by FROM infestation_dirty_keys WHERE pattern_key = :k", k=BIG_KEY) == (
        claimed_by
    ), "the worker finished before it was killed; the refresh must take longer"
    survivor = next(p for p in fleet.workers if p.poll() is None)

    async def claim_expired() -> bool:
        return bool(
            await scalar("SELECT claimed_until < now() FROM infestation_dirty_keys WHERE pattern_key = :k", k=BIG_KEY)
        )

    await eventually(claim_expired, timeout=10, what="the dead worker's claim expires")
    await queue.enqueue_drain()  # the next commit's ring (or the survivor's minute sweep) would do the same

    try:
        await eventually(no_dirty_key, timeout=30, what="the survivor refreshes the abandoned key")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{await _activity()}\n{fleet.worker_log(survivor)}") from None
    refreshed_at = await scalar("SELECT refreshed_at FROM infestation_patterns WHERE pattern_key = :k", k=BIG_KEY)
    assert refreshed_at > killed_at, "refreshed after the kill, so by the survivor"
    assert survivor.poll() is None, fleet.worker_log(survivor)
    assert await shadow_compare_all() == []

    before = await projection_rows(BIG_KEY)
    assert len(before["instances"]) == BIG_REPOSITORIES * BIG_PER_REPOSITORY
    await projection.refresh_pattern(BIG_KEY)
    assert await projection_rows(BIG_KEY) == before, "a recomputation from source changes nothing"
    assert await dirty_count() == 0


# --- docs -------------------------------------------------------------------------------------------------------------


def test_data_md_classifies_every_table() -> None:
    """docs/data.md says for every table whether it is derived or authoritative (the scaling decisions rest on it)."""
    from app.models import metadata

    doc = (Path(__file__).resolve().parents[2] / "docs" / "data.md").read_text()
    rows = [line for line in doc.splitlines() if line.startswith("| `")]
    classified = {name for line in rows for name in line.split("|")[1].replace("`", " ").replace(",", " ").split()}
    missing = sorted((set(metadata.tables) | {"alembic_version"}) - classified)
    assert missing == [], f"docs/data.md does not classify: {missing}"
    for line in rows:
        kind = line.split("|")[2]
        assert any(word in kind for word in ("derived", "authoritative", "self-healing")), line
