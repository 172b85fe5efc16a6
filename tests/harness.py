"""Real `tarakan` processes for tests/, e2e/ and bench/: start one, wait for it to answer, stop it, or run a CLI
command to completion as an operator would. No pytest here, so the benchmarks can import it too."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import httpx

from app.devservices import free_port, pdeathsig

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"


def spawn(
    *args: str, env: dict[str, str] | None = None, log: Path | None = None, quiet: bool = False, cwd: Path = ROOT
) -> subprocess.Popen[bytes]:
    """A `tarakan` process that dies with its parent, even on SIGKILL. With `log`, its stdout and stderr go to
    that file (to wait for a log line or show it on failure); `quiet` discards them; otherwise they are ours.
    `cwd`: the source tree it runs (`python -m` imports from there; a benchmark's baseline tree)."""
    with open(log, "ab") if log is not None else contextlib.nullcontext() as out:
        target = subprocess.DEVNULL if quiet else out
        return subprocess.Popen(
            [sys.executable, "-m", "app.cli", *args],
            env={**os.environ, **(env or {})},
            cwd=cwd,
            preexec_fn=pdeathsig(signal.SIGTERM),
            stdout=target,
            stderr=subprocess.STDOUT if out is not None else target,
        )


def wait_http(url: str, timeout: float = 30) -> None:
    """Poll `url` until it answers 200."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} did not answer in {timeout}s")
        time.sleep(0.05)


def stop(proc: subprocess.Popen[bytes], sig: signal.Signals = signal.SIGINT, timeout: float = 10) -> None:
    """Ask a process to stop (SIGINT: a server's graceful shutdown), kill it if it has not within `timeout`."""
    if proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def start_server(
    env: dict[str, str] | None = None,
    *,
    quiet: bool = False,
    args: tuple[str, ...] = (),
    log: Path | None = None,
    cwd: Path = ROOT,
    timeout: float = 30,
) -> tuple[subprocess.Popen[bytes], str]:
    """`tarakan serve ARGS` on a free loopback port, answering /healthz; returns the process and its base URL.
    `args`: more serve options (`--workers 2`); `log`, `quiet`, `cwd`: as for `spawn`."""
    base = f"http://127.0.0.1:{free_port()}"
    port = base.rsplit(":", 1)[1]
    env = {**(env or {}), "BASE_URL": base}
    proc = spawn("serve", "--port", port, *args, env=env, log=log, quiet=quiet, cwd=cwd)
    try:
        wait_http(f"{base}/healthz", timeout=timeout)
    except BaseException:
        stop(proc)
        raise
    return proc, base


@contextlib.contextmanager
def running_server(env: dict[str, str] | None = None) -> Iterator[str]:
    """A live server for the duration of the block (the live_server fixture of the browser tests)."""
    proc, base = start_server(env)
    try:
        yield base
    finally:
        stop(proc)


class CliResult(NamedTuple):
    code: int
    out: str
    err: str


async def tarakan(*args: str, stdin: str | bytes | None = None, timeout: float = 120) -> CliResult:
    """Run `tarakan ARGS...` to completion in a separate process (the CLI runs its own event loop)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "app.cli",
        *args,
        cwd=ROOT,
        env=dict(os.environ),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    data = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
    out, err = await asyncio.wait_for(proc.communicate(data), timeout)
    assert proc.returncode is not None
    return CliResult(proc.returncode, out.decode(), err.decode())


def assert_one_line_error(result: CliResult, fragment: str) -> None:
    """The CLI's failure contract: exit status 1 and one `tarakan: error: ...` line naming the problem."""
    assert result.code == 1, result
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("tarakan: error: ") and fragment in lines[0], lines[0]
