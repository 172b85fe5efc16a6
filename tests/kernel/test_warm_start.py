"""A server process answers only once warm (docs/scaling.md "A process answers warm"): its pooled connections are
open before its first answer, so a burst meeting a process that just started does not wait, request by request,
for Postgres backends to start."""

from __future__ import annotations

import os

import psycopg

from tests.harness import start_server, stop

POOL = 6


def backends() -> int:
    with psycopg.connect(os.environ["DATABASE_URL"].replace("+psycopg", ""), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND backend_type = 'client backend'"
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_server_opens_its_pool_before_it_answers() -> None:
    before = backends()
    proc, _base = start_server({"DB_POOL_SIZE": str(POOL)})  # it has answered /healthz, and nothing else
    try:
        assert backends() - before >= POOL
    finally:
        stop(proc)
    assert backends() - before < POOL  # its connections went with it
