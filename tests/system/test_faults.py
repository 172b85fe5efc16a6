"""Fault injection (docs/reliability.md): a real `tarakan serve` and `tarakan worker` on their OWN embedded Postgres
and Valkey (never the suite's), under a steady mix of page reads and report submissions; Postgres is restarted
once and Valkey once while the load runs.

Asserted: every answer is a success or a 503 with Retry-After (no 500, no dropped connection, no traceback in the
server's log); after each restart every page answers 200 again within 20 s; every report that was accepted (201,
or 200 for a retry whose first answer was lost) is stored once and reflected in the atlas once the worker drained;
the worker is the same process throughout. The figures go to test-artifacts/faults.json (docs/reliability.md
quotes them)."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.accounts.service import create_account, create_token
from app.devservices import Postgres, Redis, free_port
from app.infestations.queries import list_infestations_rollup
from app.infestations.shadow import shadow_compare_all
from app.kernel import db
from app.kernel.errors import ServiceUnavailable
from app.migrate import upgrade_to_head
from app.reports.finding_memory import pattern_key
from tests import factories
from tests.harness import ARTIFACTS, spawn, stop, wait_http
from tests.sql import scalar

TITLES = ["SQL injection in login handler", "Hard-coded AWS secret key", "Path traversal in upload handler"]
PAGES = ["/", "/infestations", "/infestations.json", "/search?q=fault", "/sitemap.xml", "/infestations.atom"]
STREAMED = {"/sitemap.xml"}
REPOSITORIES = 4
OUTAGE_SECONDS = 3.0
RECOVERY_LIMIT = 20.0


@pytest.fixture(scope="module")
def own_services() -> Iterator[tuple[Postgres, Redis, Path]]:
    tmp = Path(tempfile.mkdtemp(prefix="tarakan-faults-"))  # under /tmp: reachable by the unprivileged postgres user
    pg = Postgres(tmp / "pg", fast_unsafe=True).start()
    redis = Redis(tmp / "redis").start()
    try:
        yield pg, redis, tmp
    finally:
        redis.stop()
        pg.stop()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
async def on_own_services(
    own_services: tuple[Postgres, Redis, Path], monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Postgres, Redis, Path]]:
    """This process and the processes it spawns use the fault test's own servers (and no replica)."""
    pg, redis, _ = own_services
    monkeypatch.setenv("DATABASE_URL", pg.url)
    monkeypatch.setenv("REDIS_URL", redis.url)
    monkeypatch.setenv("DATABASE_REPLICA_URL", "")
    await asyncio.to_thread(upgrade_to_head)
    try:
        yield own_services
    finally:
        await db.dispose_engines(pg.url)


class Load:
    """Readers and submitters hitting one server until stopped; every answer (or transport failure) is recorded."""

    def __init__(self, base: str, bearer: dict[str, str], repos: list[Any]) -> None:
        self.base, self.bearer, self.repos = base, bearer, repos
        self.answers: list[tuple[float, str, int, str | None]] = []  # (when, path, status, Retry-After)
        self.failures: list[str] = []  # transport errors: a dropped or refused connection
        self.accepted: dict[int, int] = {}  # report number -> report id
        self.replayed = 0
        self.aborted_streams = 0
        self._next = 0
        self._stopped = asyncio.Event()

    def report(self, i: int) -> dict[str, Any]:
        return {
            "commit_sha": f"{i:040x}",
            "model": "gpt-test",
            "prompt_version": "review/v1",
            "run_id": f"fault-{i}",
            "document": {
                "tarakan_scan_format": 1,
                "findings": [
                    {
                        "file": f"src/fault{i}.py",
                        "line_start": 3,
                        "line_end": 4,
                        "severity": "high",
                        "title": TITLES[i % len(TITLES)],
                        "description": "submitted while the dependencies restart",
                    }
                ],
            },
        }

    def repo_of(self, i: int) -> Any:
        return self.repos[i % len(self.repos)]

    async def _record(self, http: httpx.AsyncClient, method: str, path: str, **kwargs: Any) -> httpx.Response | None:
        started: httpx.Response | None = None
        try:
            async with http.stream(method, self.base + path, **kwargs) as response:
                started = response
                await response.aread()
        except httpx.HTTPError as exc:
            if started is not None and started.status_code == 200 and path in STREAMED:
                # the database went away in the middle of a streamed document: the server aborts it (the client
                # sees a broken transfer, never a short document); only a response that had started may end so
                self.aborted_streams += 1
            else:
                self.failures.append(f"{method} {path}: {type(exc).__name__}: {exc}")
            return None
        self.answers.append((time.monotonic(), path, response.status_code, response.headers.get("retry-after")))
        return response

    async def reader(self, n: int) -> None:
        async with httpx.AsyncClient(timeout=30) as http:
            k = n
            while not self._stopped.is_set():
                await self._record(http, "GET", PAGES[k % len(PAGES)])
                k += 1
                await asyncio.sleep(0.02)

    async def submitter(self) -> None:
        """Submits report after report; a report that got a 503 is retried with the same run_id until accepted."""
        async with httpx.AsyncClient(timeout=30) as http:
            pending: int | None = None
            while not self._stopped.is_set():
                if pending is None:
                    pending, self._next = self._next, self._next + 1
                repo = self.repo_of(pending)
                path = f"/api/v1/repos/{repo.host}/{repo.owner}/{repo.name}/reports"
                response = await self._record(
                    http, "POST", path, headers=self.bearer, content=json.dumps(self.report(pending))
                )
                if response is not None and response.status_code in (200, 201):
                    self.accepted[pending] = response.json()["id"]
                    self.replayed += response.status_code == 200
                    pending = None
                await asyncio.sleep(0.05)
            # a report left pending when the load stops was never accepted: nothing to find for it

    def stop(self) -> None:
        self._stopped.set()


async def all_pages_ok(base: str) -> bool:
    async with httpx.AsyncClient(timeout=5) as http:
        for path in PAGES:
            try:
                if (await http.get(base + path)).status_code != 200:
                    return False
            except httpx.HTTPError:
                return False
    return True


async def seconds_until(check: Any, *, limit: float, what: str) -> float:
    started = time.monotonic()
    while not await check():
        assert time.monotonic() - started < limit, f"{what} within {limit} s"
        await asyncio.sleep(0.1)
    return time.monotonic() - started


async def test_a_postgres_and_a_valkey_restart_under_load_cost_only_503s_and_lose_nothing(
    on_own_services: tuple[Postgres, Redis, Path],
) -> None:
    pg, redis, tmp = on_own_services
    agent = await create_account("agent@example.com", "agent", platform_role="moderator", state="active")  # no limits
    bearer = {"Authorization": f"Bearer {await create_token(agent.id, ['findings:submit'])}"}
    repos = [await factories.create_repository("fault", f"repo{n}") for n in range(REPOSITORIES)]

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server_log, worker_log = tmp / "serve.log", tmp / "worker.log"
    server = spawn("serve", "--port", str(port), env={"BASE_URL": base}, log=server_log)
    worker = spawn("worker", env={"INFESTATIONS_HOT_KEY_INTERVAL": "1"}, log=worker_log)
    figures: dict[str, Any] = {}
    try:
        await asyncio.to_thread(wait_http, f"{base}/healthz")
        while "rollup worker" not in worker_log.read_text(errors="replace"):
            assert worker.poll() is None, worker_log.read_text(errors="replace")
            await asyncio.sleep(0.05)

        load = Load(base, bearer, repos)
        tasks = [asyncio.create_task(load.reader(n)) for n in range(3)] + [asyncio.create_task(load.submitter())]
        await asyncio.sleep(2)

        # Postgres: a fast shutdown (every connection terminated); Valkey: stopped (its queue is lost: no
        # persistence here); each a few seconds away, then back on the same port
        outages: dict[str, tuple[float, float]] = {}
        for name, service in (("postgres", pg), ("valkey", redis)):
            down = time.monotonic()
            await asyncio.to_thread(service.stop)
            await asyncio.sleep(OUTAGE_SECONDS)
            await asyncio.to_thread(service.start)
            outages[name] = (down, time.monotonic())
            figures[f"{name}_recovery_seconds"] = round(
                await seconds_until(lambda: all_pages_ok(base), limit=RECOVERY_LIMIT, what="every page answers 200"),
                2,
            )
            if name == "postgres":
                await asyncio.sleep(2)
        (pg_down, pg_back), (redis_down, redis_back) = outages["postgres"], outages["valkey"]
        await seconds_until(
            lambda: _logged(worker_log, "reconnected to Redis"), limit=RECOVERY_LIMIT, what="the worker reconnects"
        )
        figures["worker_reconnect_seconds"] = round(time.monotonic() - redis_back, 2)
        await asyncio.sleep(2)
        load.stop()
        await asyncio.gather(*tasks)

        # after the load: the worker drains the backlog by itself (rings lost with Valkey included)
        drained = await seconds_until(_no_dirty_key, limit=30, what="the worker drains every dirty key")
        figures["drain_after_load_seconds"] = round(drained, 2)
        assert worker.poll() is None, "the worker exited:\n" + worker_log.read_text(errors="replace")
        assert server.poll() is None
    finally:
        stop(worker)
        stop(server)

    statuses = Counter(status for _, _, status, _ in load.answers)
    unavailable = [a for a in load.answers if a[2] == 503]
    figures.update(
        requests=len(load.answers),
        statuses={str(k): v for k, v in sorted(statuses.items())},
        during_postgres_outage=_window(load.answers, pg_down, pg_back + figures["postgres_recovery_seconds"]),
        during_valkey_outage=_window(load.answers, redis_down, redis_back + figures["valkey_recovery_seconds"]),
        streams_aborted_midway=load.aborted_streams,
        reports_accepted=len(load.accepted),
        reports_replayed=load.replayed,
    )
    (ARTIFACTS / "faults.json").parent.mkdir(exist_ok=True)
    (ARTIFACTS / "faults.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures))

    assert load.failures == [], load.failures[:5]  # no dropped or refused connection before a response started
    assert set(statuses) <= {200, 201, 503}, statuses
    assert all(retry_after == str(ServiceUnavailable.RETRY_AFTER) for _, _, _, retry_after in unavailable)
    assert unavailable, "the Postgres restart went unnoticed: the test did not test anything"
    assert all(pg_down <= when for when, _, _, _ in unavailable)
    log = server_log.read_text(errors="replace")
    assert "Exception in ASGI application" not in log and "Traceback" not in log, log[-3000:]
    assert "database unavailable in request" in log
    if load.aborted_streams:
        assert "database unavailable in stream" in log  # an aborted stream is logged as such

    # every accepted report is stored once and reflected in the atlas
    assert len(load.accepted) >= 10, figures
    assert int(await scalar("SELECT count(*) FROM scans")) == len(load.accepted)
    assert sorted(load.accepted.values()) == sorted(set(load.accepted.values()))
    expected: dict[str, set[int]] = {}
    for i in load.accepted:
        expected.setdefault(pattern_key(TITLES[i % len(TITLES)]), set()).add(load.repo_of(i).id)
    listed = await list_infestations_rollup(days=30, min_repos=1, limit=40)
    assert {item["pattern_key"]: item["repo_count"] for item in listed} == {k: len(v) for k, v in expected.items()}
    assert sum(item["instance_count"] for item in listed) == len(load.accepted)
    assert await shadow_compare_all() == []


async def _logged(path: Path, fragment: str) -> bool:
    return fragment in path.read_text(errors="replace")


async def _no_dirty_key() -> bool:
    return int(await scalar("SELECT count(*) FROM infestation_dirty_keys")) == 0


def _window(answers: list[tuple[float, str, int, str | None]], start: float, end: float) -> dict[str, int]:
    inside = Counter(str(status) for when, _, status, _ in answers if start <= when <= end)
    return dict(sorted(inside.items()))
