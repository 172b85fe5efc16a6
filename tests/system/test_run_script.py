"""The `./run` launcher (`python -m app`): migrate, seed-if-empty, serve + worker, and a clean stop on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from app.devservices import free_port
from tests import factories
from tests.harness import ROOT


def _process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state) for every live process."""
    table: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        table[int(entry.name)] = (int(fields[1]), fields[0])
    return table


def descendants(root: int) -> set[int]:
    table = _process_table()
    found: set[int] = set()
    frontier = {root}
    while frontier:
        children = {pid for pid, (ppid, _) in table.items() if ppid in frontier and pid not in found}
        found |= children
        frontier = children
    return found


def alive(pid: int) -> bool:
    state = _process_table().get(pid)
    return state is not None and state[1] not in ("Z", "X")


def worker_pid(pids: set[int], *, missing_ok: bool = False) -> int | None:
    """The live `tarakan worker` process among `pids`."""
    for pid in pids:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"worker" in argv and alive(pid):
            return pid
    assert missing_ok, f"no worker among {pids}"
    return None


async def wait_for(url: str, timeout: float) -> httpx.Response:
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(timeout=2) as http:
        while True:
            try:
                response = await http.get(url)
                if response.status_code == 200:
                    return response
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not answer 200 within {timeout}s")
            await asyncio.sleep(0.1)


async def test_launcher_serves_then_stops_every_child_on_sigterm() -> None:
    # a registry that is not empty: the launcher's `seed --demo --if-empty` must leave it alone
    await factories.create_repository("acme", "already-here")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="tarakan-run-") as data, tempfile.TemporaryFile() as log:
        # no BASE_URL: ./run derives it from PORT and prints it with the others, for a second terminal
        env = {**{k: v for k, v in os.environ.items() if k != "BASE_URL"}, "PORT": str(port), "APP_DATA_DIR": data}
        launcher = subprocess.Popen(
            [sys.executable, "-m", "app"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )
        children: set[int] = set()
        try:
            await wait_for(f"http://127.0.0.1:{port}/healthz", timeout=90)
            ready = await wait_for(f"http://127.0.0.1:{port}/readyz", timeout=30)
            assert ready.json()["checks"] == {"database": "ok", "schema": "ok", "redis": "ok"}
            # the worker got a free metrics port, printed with the web's: both answer a scrape
            printed: list[str] = []
            deadline = time.monotonic() + 10
            while not printed and time.monotonic() < deadline:
                log.seek(0)
                printed = re.findall(r"(http://127\.0\.0\.1:\d+/metrics) \(worker\)", log.read().decode())
                await asyncio.sleep(0.05)
            [worker_metrics] = printed
            assert "tarakan_infestations_refresh_seconds" in (await wait_for(worker_metrics, timeout=30)).text
            children = descendants(launcher.pid)
            assert len(children) >= 2  # at least the web server and the worker

            # a worker that dies is restarted, and the launcher says so (docs/reliability.md)
            worker = worker_pid(children)
            assert worker is not None
            os.kill(worker, signal.SIGKILL)
            deadline = time.monotonic() + 20
            while (replacement := worker_pid(descendants(launcher.pid) - {worker}, missing_ok=True)) is None:
                assert time.monotonic() < deadline, "the launcher did not restart the worker"
                await asyncio.sleep(0.1)
            children = descendants(launcher.pid) | {worker}

            launcher.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(launcher.wait, 30)
        finally:
            if launcher.poll() is None:
                launcher.kill()
                launcher.wait()
        log.seek(0)
        output = log.read().decode(errors="replace")

    assert code == 0, output
    assert "[run] the worker exited with -9; restarting it" in output, output
    assert alive(replacement) is False
    assert f"http://127.0.0.1:{port}/" in output
    [paste] = [line for line in output.splitlines() if line.startswith("export ")]
    pasted = subprocess.run(
        ["bash", "-c", paste + '; echo "$DATABASE_URL|$REDIS_URL|$BASE_URL"'], capture_output=True, text=True
    ).stdout.strip()
    assert pasted == f"{env['DATABASE_URL']}|{env['REDIS_URL']}|http://127.0.0.1:{port}", output
    assert "seed: skipped" in output, output
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in children) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert [pid for pid in children if alive(pid)] == [], output
    async with httpx.AsyncClient(timeout=1) as http:
        try:
            await http.get(f"http://127.0.0.1:{port}/healthz")
            raise AssertionError("the web server still answers after SIGTERM")
        except httpx.ConnectError:
            pass

    # the database the launcher migrated and skipped seeding is unchanged
    from app.registry.service import get_repository

    assert await get_repository("github.com", "acme", "already-here") is not None
    assert await get_repository("github.com", "acme-labs", "ledgerd") is None
