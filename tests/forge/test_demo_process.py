"""The demo forge as a process (`python -m app.forge.demo --dir D --port N`, what `./run` starts): it serves the
repositories and commits of the folder layout of docs/forge.md, and nothing else."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.forge import api

FIRST = "1" * 40
SECOND = "2" * 40


@pytest.fixture
def demo_process(tmp_path: Path) -> Iterator[dict[str, str]]:
    repo = tmp_path / "github.com" / "acme" / "widget"
    (repo / "v1" / "src").mkdir(parents=True)
    (repo / "v1" / "src" / "app.py").write_bytes(b"eval(input())\n")
    (repo / "v2").mkdir()
    (repo / "v2" / "README").write_bytes(b"fixed\n")
    commits = [
        {"sha": FIRST, "committed_at": "2025-01-02T03:04:05+00:00", "dir": "v1"},
        {"sha": SECOND, "committed_at": "2025-02-02T03:04:05+00:00", "dir": "v2"},
    ]
    meta = {"default_branch": "main", "forge_id": 9, "description": "demo", "language": "Python", "commits": commits}
    (repo / "repository.json").write_text(json.dumps(meta))
    process = subprocess.Popen(
        [sys.executable, "-m", "app.forge.demo", "--dir", str(tmp_path), "--port", "0"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        settings = dict(process.stdout.readline().strip().split("=", 1) for _ in range(5))
        yield settings
    finally:
        process.terminate()
        process.wait(timeout=10)


async def test_the_demo_process_serves_its_folder(
    demo_process: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in demo_process.items():
        monkeypatch.setenv(name, value)
    found = await api.repository("github.com", "acme", "widget")
    assert found.value is not None and (found.value.forge_id, found.value.language) == ("9", "Python")
    head = await api.commit("github.com", "acme", "widget", "main")
    assert head.value is not None and head.value.sha == SECOND  # the last commit is the branch's head
    old = await api.raw_file("github.com", "acme", "widget", FIRST, "src/app.py")
    assert old.value is not None and old.value.data == b"eval(input())\n"
    assert (await api.raw_file("github.com", "acme", "widget", SECOND, "src/app.py")).outcome == "missing"
    assert (await api.in_history("github.com", "acme", "widget", "main", FIRST)).value is True
