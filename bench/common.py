"""What the benchmark scripts share: percentiles, real `tarakan` processes, and their section of
docs/benchmarks.md (each script rewrites only its own section)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from app.devservices import pdeathsig

ROOT = Path(__file__).resolve().parent.parent


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def spawn(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A real `tarakan` process that dies with the benchmark, even on SIGKILL."""
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli", *args],
        env={**os.environ, **env},
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=pdeathsig(signal.SIGTERM),
    )


def wait_http(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} did not answer")
        time.sleep(0.1)


def write_section(markdown: str, heading: str) -> None:
    """Replace (or append) only `heading`'s section of docs/benchmarks.md; other sections stay as they are."""
    path = ROOT / "docs" / "benchmarks.md"
    text = path.read_text() if path.exists() else "# Benchmarks\n\nFigures measured on this project's machines.\n"
    start = text.find(heading + "\n")
    if start < 0:
        start = text.find(heading + " ")
    if start >= 0:
        end = text.find("\n## ", start + len(heading))
        text = text[:start] + markdown.rstrip() + "\n" + (text[end:] if end >= 0 else "")
    else:
        text = text.rstrip() + "\n\n" + markdown.rstrip() + "\n"
    path.write_text(text)
