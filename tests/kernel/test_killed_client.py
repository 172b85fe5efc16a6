"""A process killed mid-statement (OOM killer, SIGKILL) does not leave its Postgres backend running the statement and
holding its locks: every connection checks its client's socket (`client_connection_check_interval`, app/kernel/engines.py;
docs/scaling.md "Stopping a worker mid-refresh")."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

from tests.sql import scalar

# holds a lock on the row, then runs a long statement, as a refresh does
CHILD = """
import asyncio
from sqlalchemy import text
from app.kernel import db

async def main() -> None:
    async with db.transaction() as session:
        await session.execute(text("SELECT pg_advisory_xact_lock(4242)"))
        print("locked", flush=True)
        await session.execute(text("SELECT pg_sleep(120)"))

asyncio.run(main())
"""


async def test_a_killed_process_releases_its_locks_within_seconds() -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, env=os.environ.copy())
    try:
        assert child.stdout is not None
        assert await asyncio.to_thread(child.stdout.readline) == b"locked\n"
        assert await scalar("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242") == 1
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    deadline = time.monotonic() + 10
    while await scalar("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242"):
        # without the check the backend would sleep out its 120 s statement, lock held
        assert time.monotonic() < deadline, "the killed process's backend still holds its lock"
        await asyncio.sleep(0.1)
