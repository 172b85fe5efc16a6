"""Clear failures (docs/operations.md "Command line failures"): infrastructure errors are one line and a non-zero
exit, never a traceback; `serve` and `worker` refuse a missing environment and a schema behind the code."""

from __future__ import annotations

import asyncio
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from app.devservices import free_port
from app.ops.schema import code_head
from tests.harness import CliResult, spawn, stop, tarakan, wait_http

NOTES = "evidence notes long enough for the rule"
EVERY_COMMAND: list[tuple[str, ...]] = [
    ("migrate",),
    ("seed", "--demo"),
    ("accounts", "create", "a@example.com", "--handle", "alice"),
    ("tokens", "create", "a@example.com", "--scopes", "findings:submit"),
    ("repos", "add", "github.com/acme/widget"),
    ("repos", "delete", "github.com/acme/widget", "--as", "mod@example.com"),
    ("reports", "submit", "github.com/acme/widget", "REPORT", "--as", "a@example.com"),
    ("moderate", "scan", "1", "--visibility", "restricted", "--reason", "spam", "--notes", NOTES, "--as", "m@x.io"),
    (
        "moderate",
        "repo",
        "github.com/acme/widget",
        "--listing",
        "listed",
        "--reason",
        "ok",
        "--notes",
        NOTES,
        "--as",
        "m@x.io",
    ),
    ("moderate", "account", "alice", "--state", "active", "--reason", "ok", "--notes", NOTES, "--as", "m@x.io"),
    ("jobs", "drain"),
    ("infestations", "refresh", "a" * 64),
    ("infestations", "recompute-windows"),
    ("infestations", "reconcile"),
    ("infestations", "backfill"),
    ("infestations", "shadow-compare"),
    ("infestations", "cutover-check"),
    ("serve", "--port", "0"),
]


def one_line(result: CliResult) -> str:
    assert result.code == 1, result
    assert "Traceback" not in result.err, result.err
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    return lines[0]


async def test_with_the_database_stopped_every_command_fails_with_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    stopped = f"postgresql://tarakan:secret@127.0.0.1:{free_port()}/tarakan"  # nothing listens there
    monkeypatch.setenv("DATABASE_URL", stopped)
    monkeypatch.delenv("DATABASE_REPLICA_URL")  # the suite points it at the live test server
    report = tmp_path / "report.json"
    report.write_text('{"scan_format_version": 1}')
    slots = asyncio.Semaphore(4)

    async def run(args: tuple[str, ...]) -> CliResult:
        async with slots:
            return await tarakan(*(str(report) if a == "REPORT" else a for a in args))

    results = await asyncio.gather(*(run(args) for args in EVERY_COMMAND))
    unclear = {
        " ".join(args): result
        for args, result in zip(EVERY_COMMAND, results, strict=True)
        if result.code != 1
        or "Traceback" in result.err
        or not re.fullmatch(
            r"tarakan: error: database postgresql://tarakan:\*\*\*@127\.0\.0\.1:\d+/tarakan failed: .*Connection refused.*\n",
            result.err,
        )
    }
    assert unclear == {}


@pytest.mark.parametrize(
    ("missing", "daemon"), [("DATABASE_URL", "serve"), ("REDIS_URL", "serve"), ("REDIS_URL", "worker")]
)
async def test_serve_and_worker_refuse_to_start_without_their_servers(
    monkeypatch: pytest.MonkeyPatch, missing: str, daemon: str
) -> None:
    monkeypatch.delenv(missing)
    line = one_line(await tarakan(daemon, timeout=30))
    assert line.startswith(f"tarakan: error: {missing} is not set") and "./run" in line, line


def database_at(name: str, revision: str | None) -> str:
    """A fresh database in the test server whose alembic revision is `revision` (None: never migrated)."""
    admin = os.environ["DATABASE_URL"].replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    url = admin.rsplit("/", 1)[0] + f"/{name}"
    if revision is not None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE alembic_version (version_num varchar(32) PRIMARY KEY)")
            conn.execute("INSERT INTO alembic_version VALUES (%s)", (revision,))
    return url


@pytest.fixture(scope="module")
def behind() -> Iterator[str]:
    yield database_at("tarakan_behind", "0001")


async def test_serve_refuses_a_schema_behind_the_code_and_readyz_says_why(
    behind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert code_head() != "0001"
    monkeypatch.setenv("DATABASE_URL", behind)
    line = one_line(await tarakan("serve", "--port", str(free_port()), timeout=30))
    assert (
        line == f"tarakan: error: schema is behind: database at 0001, code needs {code_head()}; run `tarakan migrate`"
    )

    never = database_at("tarakan_never_migrated", None)
    monkeypatch.setenv("DATABASE_URL", never)
    assert "database at no migrations" in one_line(await tarakan("serve", "--port", str(free_port()), timeout=30))

    from app.main import app

    monkeypatch.setenv("DATABASE_URL", behind)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver") as client:
        ready = await client.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["checks"]["schema"] == f"error: {line.removeprefix('tarakan: error: ')}"


async def test_the_worker_refuses_a_schema_behind_the_code_with_the_same_line(
    behind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", behind)
    line = one_line(await tarakan("worker", "--burst", timeout=30))
    assert (
        line == f"tarakan: error: schema is behind: database at 0001, code needs {code_head()}; run `tarakan migrate`"
    )


async def test_a_schema_ahead_of_the_code_is_served_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    ahead = database_at("tarakan_ahead", "9999_from_a_newer_release")
    port = free_port()
    proc = spawn("serve", "--port", str(port), env={"DATABASE_URL": ahead}, quiet=True)
    try:
        await asyncio.to_thread(wait_http, f"http://127.0.0.1:{port}/healthz")
        ready = await asyncio.to_thread(httpx.get, f"http://127.0.0.1:{port}/readyz")
    finally:
        await asyncio.to_thread(stop, proc, signal.SIGINT, 10)
    assert ready.status_code == 200
    assert ready.json()["checks"]["schema"] == "ok"
    assert ready.json()["warnings"] == [
        f"schema 9999_from_a_newer_release is ahead of this code's {code_head()} (a rolling upgrade?); serving anyway"
    ]
