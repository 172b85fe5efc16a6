"""Test services: one embedded Postgres + Valkey per session (unless DATABASE_URL/REDIS_URL are given),
migrated once with Alembic; every test starts from empty tables."""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest
import redis

from app.devservices import Postgres, Redis, Standby
from app.forge.demo import DemoForge
from tests.harness import ARTIFACTS

FORGE_URL_SETTINGS = (
    "FORGE_GITHUB_API_URL",
    "FORGE_GITHUB_RAW_URL",
    "FORGE_GITLAB_URL",
    "FORGE_CODEBERG_URL",
    "FORGE_TARAKAN_URL",
)
# never routed anywhere (RFC 5737): a test may set a forge base there to prove it is refused before any connection
_UNROUTED = ipaddress.ip_network("192.0.2.0/24")


def _stays_here(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address in _UNROUTED


@pytest.fixture(autouse=True)
def forge_stays_on_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing in the suite asks a real forge: a test starting with a forge base that is not loopback fails, and so
    does any forge request the test makes elsewhere (every one goes through app.forge.http.get). A test may set a
    public base to check a URL it builds, never ask it."""
    names = [name for name in (*FORGE_URL_SETTINGS, "FORGE_RAW_URL_TEMPLATE") if os.environ.get(name)]
    strays = [f"{name}={os.environ[name]}" for name in names if not _stays_here(os.environ[name])]
    assert not strays, f"a forge base is not loopback: {', '.join(strays)}"
    from app.forge import http as forge_http

    real_get = forge_http.get

    async def guarded_get(url: str, **kwargs: Any) -> forge_http.Reply:
        # plain http elsewhere is refused before any connection (tests/maintainers/test_forge.py proves it)
        asked = urlsplit(url).scheme == "https" or _stays_here(url)
        assert not asked or _stays_here(url), f"the test asked a forge that is not loopback: {url}"
        return await real_get(url, **kwargs)

    monkeypatch.setattr(forge_http, "get", guarded_get)


def _plain_url(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


# A RAM-backed /dev/shm holds the session's Postgres, Valkey and scratch files when it has room (a container's default
# 64 MB does not; then /tmp): each wipe's TRUNCATE makes and drops a file per table and index, and every write of the
# suite goes through the cluster's WAL; on a busy machine's ext4 (mounted with discard) both take several times longer.
SCRATCH_MIN_FREE = 4 << 30


def _scratch_dir() -> str | None:
    try:
        shm = os.statvfs("/dev/shm")
    except OSError:
        return None
    roomy = shm.f_bavail * shm.f_frsize >= SCRATCH_MIN_FREE
    return "/dev/shm" if roomy and os.access("/dev/shm", os.W_OK | os.X_OK) else None


@pytest.fixture(scope="session", autouse=True)
def services() -> Iterator[dict[str, str]]:
    tmp = tempfile.mkdtemp(prefix="tarakan-test-", dir=_scratch_dir())  # reachable by the unprivileged postgres user
    ARTIFACTS.mkdir(exist_ok=True)  # the servers' logs and the figures some tests write, whichever file runs alone
    started: list[Postgres | Redis] = []
    if not os.environ.get("DATABASE_URL"):
        pg = Postgres(os.path.join(tmp, "pg"), fast_unsafe=True).start()
        started.append(pg)
        os.environ["DATABASE_URL"] = pg.url
    if not os.environ.get("REDIS_URL"):
        redis = Redis(os.path.join(tmp, "redis")).start()
        started.append(redis)
        os.environ["REDIS_URL"] = redis.url
    # the whole suite reads public pages through the replica path, pointed at the primary (tests/kernel/test_replica.py
    # points it elsewhere to prove the routing)
    os.environ.setdefault("DATABASE_REPLICA_URL", os.environ["DATABASE_URL"])
    os.environ.setdefault("SECRET_KEY", "test-secret-key-not-for-production")
    os.environ.setdefault("BASE_URL", "http://testserver")
    # the suite's clients share one address and a few tokens: the per-address search rate and the refused-attempt
    # allowance would turn the crawler's and the fuzzer's probes into 429s (their own tests set them)
    os.environ.setdefault("SEARCH_RATE_PER_MINUTE", "0")
    os.environ.setdefault("REFUSED_PER_MINUTE", "0")
    # the worker's continuous shadow-compare stays off in the suite (its own test runs it:
    # tests/infestations/test_shadow_continuous.py); real worker processes inherit this
    os.environ.setdefault("INFESTATIONS_SHADOW_SAMPLE", "0")
    # bulk exports (built by every real worker when none exists) go to the session's directory, not the tree's .data
    os.environ.setdefault("EXPORT_DIR", os.path.join(tmp, "exports"))
    # maintainer claims are verified against a forge: nothing in the suite leaves the machine, so the forge
    # of every host is a closed loopback port (a 503 "forge failed"); tests/maintainers plays the forge on its own
    # loopback server
    for forge_setting in FORGE_URL_SETTINGS:
        os.environ.setdefault(forge_setting, "http://127.0.0.1:9")
    # findings are checked at their commit only in the evidence tests, which opt in (EVIDENCE_CHECK=gate and the
    # loopback forge of tests/forge/conftest.py)
    os.environ.setdefault("EVIDENCE_CHECK", "off")
    from app.migrate import upgrade_to_head

    upgrade_to_head()
    yield {"DATABASE_URL": os.environ["DATABASE_URL"], "REDIS_URL": os.environ["REDIS_URL"], "TMP_DIR": tmp}
    for s in reversed(started):
        s.stop()
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="session")
def standby(services: dict[str, str]) -> Iterator[Standby]:
    """A hot standby of the test primary (streaming replication, `pg_basebackup -R`, its own port and data folder
    under the session's directory), started on first use by the tests that ask for it (about 1 s) and stopped at
    the end of the session. Its URL is `standby.url`; `caught_up(standby)` waits until it replayed everything."""
    server = Standby(os.path.join(services["TMP_DIR"], "standby"), services["DATABASE_URL"], fast_unsafe=True)
    try:
        server.start()
    except (subprocess.CalledProcessError, RuntimeError, TimeoutError) as exc:
        # the embedded wheel makes one on any machine that runs the suite: a missing standby is a failure, unless
        # the run says it has none (a DATABASE_URL whose server allows no replication connection)
        if os.environ.get("TARAKAN_TEST_NO_STANDBY") == "1":
            pytest.skip(f"TARAKAN_TEST_NO_STANDBY=1: no hot standby of {services['DATABASE_URL']}: {exc}")
        pytest.fail(f"no hot standby of {services['DATABASE_URL']} (TARAKAN_TEST_NO_STANDBY=1 skips): {exc}")
    yield server
    server.stop()


def caught_up(standby: Standby, timeout: float = 10.0) -> None:
    """Wait until the standby has replayed everything the primary committed so far (the primary runs with
    synchronous_commit=off: one synchronous commit flushes the WAL before it, so it is sent now)."""
    with psycopg.connect(_plain_url(os.environ["DATABASE_URL"]), autocommit=True) as primary:
        primary.execute("SET synchronous_commit = on")
        primary.execute("SELECT pg_current_xact_id()")
        target = primary.execute("SELECT pg_current_wal_insert_lsn()").fetchone()
    assert target is not None
    deadline = time.monotonic() + timeout
    with psycopg.connect(_plain_url(standby.url), autocommit=True) as conn:
        while True:
            row = conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target[0],)).fetchone()
            if row is not None and row[0]:
                return
            assert time.monotonic() < deadline, f"the standby did not replay {target[0]} within {timeout} s"
            time.sleep(0.005)


def _tables(conn: psycopg.Connection[Any]) -> list[str]:
    sql = "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'alembic_version'"
    return [str(r[0]) for r in conn.execute(sql)]


# The tables a TRUNCATE would change: rows, or pages of rows since deleted (the heap of a truncated table has none),
# statistics that ANALYZE, VACUUM or CREATE INDEX wrote (TRUNCATE leaves reltuples -1, "never counted", and relpages 0
# on the table and its indexes), or an owned sequence that moved (RESTART IDENTITY leaves it not yet called). One
# statement: a stat() of each table's file, no table scan.
_TOUCHED_TABLES = """
SELECT c.oid::regclass::text FROM pg_class c
WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p') AND c.relname <> 'alembic_version'
  AND (pg_relation_size(c.oid) > 0 OR c.reltuples >= 0 OR c.relpages > 0 OR c.relallvisible > 0
    OR EXISTS (
      SELECT 1 FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid
      WHERE i.indrelid = c.oid AND (x.reltuples >= 0 OR x.relpages > 0))
    OR EXISTS (
      SELECT 1 FROM pg_depend d JOIN pg_sequence s ON s.seqrelid = d.objid
      WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass AND d.refobjid = c.oid
        AND d.deptype IN ('a', 'i') AND pg_sequence_last_value(s.seqrelid) IS NOT NULL))
"""


def truncate_all() -> None:
    """Every table as `TRUNCATE <all tables> RESTART IDENTITY CASCADE` leaves it: empty, in a new empty file (rows
    come back in insertion order), never analyzed, its sequences at their start. Only the tables the last test
    touched are truncated (with those whose foreign keys point at them): the others already are in that state, and
    a TRUNCATE of all 36 tables makes files for some 180 tables and indexes (0.07 s a test on a quiet machine,
    against 0.01 s for a test that wrote nothing and 0.04 s for one that made an account). The locks are those of
    a TRUNCATE of every table, taken first, so a transaction still open on any table (a worker of the previous test
    finishing a refresh) ends before the look, as it did when every table was truncated."""
    with psycopg.connect(_plain_url(os.environ["DATABASE_URL"]), autocommit=True) as conn:
        tables = _tables(conn)
        if not tables:
            return
        # the locks are taken table by table, so they can deadlock with such a transaction; the loser is retried
        for attempt in range(5):
            try:
                with conn.transaction():
                    conn.execute(f"LOCK TABLE {', '.join(tables)} IN ACCESS EXCLUSIVE MODE")
                    touched = [str(r[0]) for r in conn.execute(_TOUCHED_TABLES)]
                    if touched:
                        conn.execute(f"TRUNCATE {', '.join(touched)} RESTART IDENTITY CASCADE")
                return
            except psycopg.errors.DeadlockDetected:
                if attempt == 4:
                    raise
                time.sleep(0.5)


def empty_tables() -> None:
    """What `truncate_all` leaves, for the few rows a test writes: each table that holds rows emptied by DELETE
    (foreign keys and triggers off for this session, as the rows all go) and every sequence a table owns back at
    its start, as `TRUNCATE ... RESTART IDENTITY` would. TRUNCATE makes new files for each table it empties and its
    indexes (`truncate_all`: 0.01-0.05 s a test, as it skips untouched tables); this takes 0.03 s. A test that
    wrote more than `BULK_ROWS` rows to a table gets `truncate_all` instead (DELETE's cost grows with the rows, and
    a big table's statistics start again, as plan tests expect)."""
    with psycopg.connect(_plain_url(os.environ["DATABASE_URL"]), autocommit=True) as conn:
        tables = _tables(conn)
        if not tables:
            return
        probe = " UNION ALL ".join(
            f"SELECT '{t}', EXISTS (SELECT 1 FROM {t} OFFSET {BULK_ROWS}) WHERE EXISTS (SELECT 1 FROM {t})"
            for t in tables
        )
        filled = conn.execute(probe).fetchall()
        if any(bulk for _table, bulk in filled):
            conn.close()
            truncate_all()
            return
        sequences = [
            r[0]
            for r in conn.execute(
                "SELECT s.oid::regclass::text FROM pg_class s JOIN pg_depend d ON d.objid = s.oid "
                "AND d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass "
                "AND d.deptype IN ('a', 'i') JOIN pg_namespace n ON n.oid = s.relnamespace "
                "WHERE s.relkind = 'S' AND n.nspname = 'public'"
            )
        ]
        # a process of the previous test (a worker finishing a run) may still hold locks, or write a row after the
        # DELETE: emptied again, and after a few tries TRUNCATE's locks wait for it, as before
        for _attempt in range(3):
            try:
                with conn.transaction():
                    conn.execute("SET LOCAL session_replication_role = replica")
                    for table, _bulk in filled:
                        conn.execute(f"DELETE FROM {table}")
                    for sequence in sequences:
                        conn.execute(
                            "SELECT setval(%s::regclass, seqstart, false) FROM pg_sequence"
                            " WHERE seqrelid = %s::regclass",
                            (sequence, sequence),
                        )
            except psycopg.errors.DeadlockDetected:
                time.sleep(0.5)
                continue
            filled = conn.execute(probe).fetchall()
            if not filled:
                return
            time.sleep(0.2)
    truncate_all()


BULK_ROWS = 2000


def reset_rate_counters() -> None:
    """The shared rate counters (app.kernel.ratelimit) are keyed by token id and address: ids restart with the tables."""
    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    try:
        keys = list(client.scan_iter("tarakan:rate:*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture
def fresh_render_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The render cache on at its default size (RENDER_CACHE_BYTES unset), empty before and after the test."""
    from app.record import rendered

    monkeypatch.delenv("RENDER_CACHE_BYTES", raising=False)
    rendered.reset()
    yield
    rendered.reset()


@pytest.fixture(autouse=True)
def clean_database(services: dict[str, str]) -> None:
    from app.kernel import flags
    from app.record import rendered
    from app.registry import queries as registry_queries
    from app.registry.stats import reset_registry_stats_cache
    from app.reports import evidence
    from app.seo import sitemap
    from app.site import home_infestations

    # TARAKAN_TEST_FAST_WIPE=1: DELETE instead of TRUNCATE (little faster since TRUNCATE skips untouched tables); off
    # by default: it finds the tests that read rows in physical order without ORDER BY (three so far, fixed)
    if os.environ.get("TARAKAN_TEST_FAST_WIPE") == "1":
        empty_tables()
    else:
        truncate_all()
    reset_rate_counters()
    # in-process caches must not outlive the rows they describe
    reset_registry_stats_cache()
    sitemap.invalidate_buckets()
    home_infestations.clear()
    flags.forget()
    registry_queries.search_cache.reset()
    rendered.reset()  # ids restart with the tables, so a version could come back with other rows behind it
    evidence.forget()


@pytest.fixture(scope="session")
def forge_server() -> Iterator[DemoForge]:
    server = DemoForge().start()
    yield server
    server.stop()


@pytest.fixture
def forge(forge_server: DemoForge, monkeypatch: pytest.MonkeyPatch) -> DemoForge:
    """The loopback forge (app.forge.demo), empty, as the forge of every host: it holds only what the test adds
    (`forge.add_repository`, `forge.add_commit`, ...) and logs every request (`forge.requests()`). Evidence tests
    also set EVIDENCE_CHECK=gate."""
    forge_server.reset()
    for name, value in forge_server.settings().items():
        monkeypatch.setenv(name, value)
    return forge_server


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    from app.main import app

    transport = httpx.ASGITransport(app=app, client=("203.0.113.7", 4711))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        yield c


@pytest.fixture
async def tiny_statement_timeout(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[None]:
    """This process's new connections cap every statement at 0.2 s, as `tarakan serve` does with DB_STATEMENT_TIMEOUT."""
    from app.kernel import db, engines

    await db.dispose_engines()
    monkeypatch.setenv("DB_STATEMENT_TIMEOUT", "0.2")
    monkeypatch.setattr(engines, "_statement_timeout", 0.0)
    db.limit_statements()
    yield
    await db.dispose_engines()
