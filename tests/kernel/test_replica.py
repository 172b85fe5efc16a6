"""Read-replica routing: public reads go to DATABASE_REPLICA_URL, moderator pages and the request right after a
moderator's write read the primary.

Two kinds of replica: a second database on the test server (`replica_probe`, migrated like the primary) that holds
different rows than the primary, so which copy a page shows says which database it read; and a real hot standby of
the test primary (`standby` in tests/conftest.py: streaming replication, started on first use), whose replay the
tests pause (`pg_wal_replay_pause()`) to make it lag on purpose.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import httpx
import psycopg
import pytest
from bs4 import BeautifulSoup
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession

from app.accounts.models import Account
from app.accounts.service import create_token
from app.devservices import Standby
from app.kernel import db
from app.kernel.config import normalize_database_url
from app.kernel.metrics import REPLICA_CONFLICTS, REPLICA_FALLBACKS, REPLICA_SKIPS
from app.kernel.security import READ_YOUR_WRITES_COOKIE
from app.migrate import upgrade_to_head
from app.moderation.service import change_statement_visibility
from app.ops import gauges
from app.registry.models import Repository
from tests.conftest import _plain_url, caught_up
from tests.maintainers.conftest import forge  # noqa: F401 (the loopback forge fixture)
from tests.maintainers.statement_support import bearer, published, state, verified_maintainer
from tests.maintainers.support import Forge
from tests.maintainers.test_statements import IMPACT
from tests.moderation.support import NOTES, SAME_ORIGIN, act_as, make_account
from tests.record.test_takedown_fence import overlapping_takedowns
from tests.reports.support import report_body
from tests.system.test_takedowns import REASON, SURFACES, World, quarantine, restrict

PROBE_DB = "replica_probe"
WIDGET = "/repos/github.com/probe/widget.json"


def _with_database(url: str, name: str) -> str:
    return make_url(_plain_url(url)).set(database=name).render_as_string(hide_password=False)


@pytest.fixture(scope="module")
def probe_database(services: dict[str, str]) -> Iterator[str]:
    """A migrated second database on the same server; dropped at the end of the module."""
    primary = os.environ["DATABASE_URL"]
    with psycopg.connect(_plain_url(primary), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {PROBE_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {PROBE_DB}")
    url = _with_database(primary, PROBE_DB)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DATABASE_URL", url)  # alembic's env.py migrates whatever DATABASE_URL names
        upgrade_to_head()
    try:
        yield url
    finally:
        with psycopg.connect(_plain_url(primary), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {PROBE_DB} WITH (FORCE)")


async def _execute(url: str, sql: str, *params: object) -> None:
    async with await psycopg.AsyncConnection.connect(_plain_url(url), autocommit=True) as conn:
        await conn.execute(sql, params)


async def _add_repository(url: str, name: str, description: str) -> None:
    await _execute(
        url,
        "INSERT INTO repositories (host, owner, name, canonical_url, description, listing_status)"
        " VALUES ('github.com', 'probe', %s, %s, %s, 'listed')",
        name,
        f"https://github.com/probe/{name}",
        description,
    )


@pytest.fixture
async def replica(probe_database: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    """DATABASE_REPLICA_URL -> the probe database, which holds a stale copy of `widget` and a row the primary lacks;
    the primary holds the current `widget` and a row the replica lacks."""
    await _execute(probe_database, "TRUNCATE repositories RESTART IDENTITY CASCADE")
    await _add_repository(probe_database, "widget", "replica copy")
    await _add_repository(probe_database, "replica-only", "only in the replica")
    # the probe has "replayed" every takedown the primary will audit here (else reads would go to the primary): its
    # takedown fence is far ahead (an event stored with its number is not numbered again at commit)
    await _execute(
        probe_database,
        "INSERT INTO audit_events (id, fence, action, subject_type, subject_id)"
        " VALUES (1000000000, 1000000000, 'probe', 'probe', 'x') ON CONFLICT DO NOTHING",
    )
    db.forget_replicas()
    primary = os.environ["DATABASE_URL"]
    await _add_repository(primary, "widget", "primary copy")
    await _add_repository(primary, "primary-only", "only in the primary")
    monkeypatch.setenv("DATABASE_REPLICA_URL", probe_database)
    try:
        yield probe_database
    finally:
        await db.dispose_engines(normalize_database_url(probe_database))  # DROP DATABASE needs its connections gone


@pytest.fixture
async def moderator(client: httpx.AsyncClient) -> Account:
    account = await make_account("mod", platform_role="moderator")
    await act_as(client, account)
    return account


async def description(client: httpx.AsyncClient, path: str = WIDGET) -> str | None:
    response = await client.get(path)
    if response.status_code == 404:
        return None
    assert response.status_code == 200, response.text
    value = response.json()["repository"]["description"]
    assert isinstance(value, str)
    return value


async def current_database(*, replica: bool = True) -> str:
    async with db.read_session(replica=replica) as session:
        return str((await session.execute(text("SELECT current_database()"))).scalar_one())


async def test_read_sessions_route_by_kind_and_primary_reads_is_scoped(replica: str) -> None:
    primary_name = make_url(_plain_url(os.environ["DATABASE_URL"])).database
    assert primary_name != PROBE_DB
    assert await current_database() == PROBE_DB
    assert await current_database(replica=False) == primary_name
    async with db.transaction() as session:
        assert (await session.execute(text("SELECT current_database()"))).scalar_one() == primary_name
    with db.primary_reads():
        assert await current_database() == primary_name
    assert await current_database() == PROBE_DB, "the flag must not outlive its block"


async def test_reads_within_a_replica_reader_keep_its_connection_only_where_they_would_read_the_replica(
    replica: str,
) -> None:
    primary_name = make_url(_plain_url(os.environ["DATABASE_URL"])).database
    probe = text("SELECT current_database() AS name, pg_backend_pid() AS pid")
    async with db.reader() as outer:
        ((name, pid),) = await outer.rows(probe)
        assert name == PROBE_DB
        async with db.reader() as inner:
            assert tuple((await inner.rows(probe))[0]) == (PROBE_DB, pid)
        async with db.read_session() as session:
            assert tuple((await session.execute(probe)).one()) == (PROBE_DB, pid)
        assert await current_database(replica=False) == primary_name
        with db.primary_reads():
            async with db.reader() as inner:
                assert (await inner.rows(probe))[0].name == primary_name
            assert await current_database() == primary_name
    async with db.shared_reads():
        with db.primary_reads():  # the block's first read opens it on the primary
            async with db.reader() as first:
                ((name, pid),) = await first.rows(probe)
        assert name == primary_name
        async with db.read_session() as session:  # the primary answers a replica's read too: its connection
            assert tuple((await session.execute(probe)).one()) == (primary_name, pid)


async def test_public_pages_read_the_replica_and_moderator_pages_the_primary(
    client: httpx.AsyncClient, replica: str
) -> None:
    assert await description(client) == "replica copy"
    assert await description(client, "/repos/github.com/probe/replica-only.json") == "only in the replica"
    assert await description(client, "/repos/github.com/probe/primary-only.json") is None
    search = (await client.get("/search.json", params={"q": "probe"})).json()
    assert {item["name"] for item in search["items"]} == {"widget", "replica-only"}

    moderator = await make_account("mod", platform_role="moderator")  # accounts and sessions live on the primary
    await act_as(client, moderator)
    console = await client.get("/moderation/repositories")
    assert console.status_code == 200
    listed = {a.get_text(strip=True) for a in BeautifulSoup(console.text, "lxml").select("a")}
    assert any("probe/primary-only" in t for t in listed) and not any("replica-only" in t for t in listed)
    # browsing public pages without having written anything: the replica is fine
    assert await description(client) == "replica copy"


async def test_the_request_after_a_moderators_write_reads_the_primary(
    client: httpx.AsyncClient, replica: str, moderator: Account
) -> None:
    acted = await client.post(
        "/moderation/repos/github.com/probe/primary-only/listing",
        data={"listing_status": "quarantined", "reason": "malware", "notes": NOTES},
        headers=SAME_ORIGIN,
    )
    assert acted.status_code == 303, acted.text
    mark = next(c for c in acted.headers.get_list("set-cookie") if c.startswith(f"{READ_YOUR_WRITES_COOKIE}="))
    assert "Max-Age=15" in mark and "HttpOnly" in mark and "SameSite=Lax" in mark

    landing = await client.get(acted.headers["location"])  # the console after the redirect
    assert landing.status_code == 200 and "quarantined" in landing.text
    assert await description(client) == "primary copy"
    assert await description(client, "/repos/github.com/probe/replica-only.json") is None
    assert await current_database() == PROBE_DB, "an in-process request must not leave the flag set"

    client.cookies.delete(READ_YOUR_WRITES_COOKIE)  # what the browser does 15 s later
    assert await description(client) == "replica copy"


async def test_refused_failed_and_cookieless_writes_do_not_pin_reads(
    client: httpx.AsyncClient, replica: str, moderator: Account
) -> None:
    def marked(response: httpx.Response) -> bool:
        return any(c.startswith(f"{READ_YOUR_WRITES_COOKIE}=") for c in response.headers.get_list("set-cookie"))

    invalid = await client.post(
        "/moderation/repos/github.com/probe/primary-only/listing",
        data={"listing_status": "banished", "reason": "malware", "notes": NOTES},
        headers=SAME_ORIGIN,
    )
    assert invalid.status_code == 422 and not marked(invalid)
    cross_site = await client.post(
        "/moderation/repos/github.com/probe/primary-only/listing",
        data={"listing_status": "quarantined", "reason": "malware", "notes": NOTES},
        headers={"Origin": "https://evil.example"},
    )
    assert cross_site.status_code == 403 and not marked(cross_site)
    assert await description(client) == "replica copy"

    client.cookies.clear()  # an agent: bearer token, no browser session
    token = await create_token(moderator.id, ["findings:submit"])
    api = await client.post(
        "/api/v1/repos/github.com/probe/primary-only/reports",
        headers={"Authorization": f"Bearer {token}"},
        json=report_body(),
    )
    assert api.status_code == 201, api.text
    assert not marked(api)
    assert await description(client) == "replica copy"


# ---- a real hot standby -----------------------------------------------------------------------------------------


def _on_standby(server: Standby, sql: str) -> object:
    with psycopg.connect(_plain_url(server.url), autocommit=True) as conn:
        cursor = conn.execute(sql)
        row = cursor.fetchone() if cursor.description else None
        return None if row is None else row[0]


RESTART_SECONDS = 120


@pytest.fixture
async def real_replica(standby: Standby, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Standby]:
    """DATABASE_REPLICA_URL -> the session's hot standby, caught up with the (freshly truncated) primary; replay is
    resumed and the standby caught up again at the end, whatever the test did. A stopped standby's restart replays
    what the primary wrote since its last checkpoint the standby replayed: the test that stops it checkpoints first,
    and the timeout leaves room for two loaded cores."""
    if standby.proc is None or standby.proc.poll() is not None:
        standby.start(timeout=RESTART_SECONDS)
    caught_up(standby, timeout=RESTART_SECONDS)  # behind the bulk writes of earlier tests (the sitemap's 25,000 rows)
    db.forget_replicas()
    monkeypatch.setenv("DATABASE_REPLICA_URL", standby.url)
    try:
        yield standby
    finally:
        await db.dispose_engines(normalize_database_url(standby.url))
        db.forget_replicas()
        if standby.proc is None or standby.proc.poll() is not None:
            standby.start(timeout=RESTART_SECONDS)
        _on_standby(standby, "SELECT pg_wal_replay_resume()")
        caught_up(standby, timeout=RESTART_SECONDS)


def pause_replay(server: Standby) -> None:
    _on_standby(server, "SELECT pg_wal_replay_pause()")


async def test_a_real_standby_streams_and_public_reads_use_it(client: httpx.AsyncClient, real_replica: Standby) -> None:
    assert _on_standby(real_replica, "SELECT pg_is_in_recovery()") is True
    primary = os.environ["DATABASE_URL"]
    await _add_repository(primary, "widget", "first words")
    caught_up(real_replica)  # streamed and replayed
    assert await description(client) == "first words"

    pause_replay(real_replica)
    await _execute(primary, "UPDATE repositories SET description = 'second words' WHERE name = 'widget'")
    await _add_repository(primary, "primary-only", "only in the primary")
    assert await description(client) == "first words", "public reads go to the standby, which has not replayed"
    assert await description(client, "/repos/github.com/probe/primary-only.json") is None
    with db.primary_reads():
        assert await description(client) == "second words"
    async with db.read_session() as session:
        assert (await session.execute(text("SELECT pg_is_in_recovery()"))).scalar_one() is True
    async with db.read_session(replica=False) as session:
        assert (await session.execute(text("SELECT pg_is_in_recovery()"))).scalar_one() is False

    _on_standby(real_replica, "SELECT pg_wal_replay_resume()")
    caught_up(real_replica)
    assert await description(client) == "second words"


async def test_a_stopped_standby_falls_back_to_the_primary_counted(
    client: httpx.AsyncClient, real_replica: Standby
) -> None:
    primary = os.environ["DATABASE_URL"]
    await _add_repository(primary, "widget", "primary copy")
    caught_up(real_replica)
    assert await description(client) == "primary copy"
    # a checkpoint the standby has replayed: its shutdown restartpoint lands there, so its restart replays seconds of
    # WAL, not all the suite wrote since it started (55 s on a quiet machine without it)
    with psycopg.connect(_plain_url(primary), autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    caught_up(real_replica)
    real_replica.stop()
    await db.dispose_engines(normalize_database_url(real_replica.url))  # the pool's connections died with it
    before = REPLICA_FALLBACKS._value.get()
    assert await description(client) == "primary copy"
    assert await description(client) == "primary copy"
    assert REPLICA_FALLBACKS._value.get() >= before + 2, "every read that went to the primary instead is counted"
    async with db.read_session() as session:
        assert (await session.execute(text("SELECT pg_is_in_recovery()"))).scalar_one() is False


# ---- takedowns hold at the next request with a lagging standby ---------------------------------------------------


def _skips(reason: str) -> float:
    value: float = REPLICA_SKIPS.labels(reason=reason)._value.get()
    return value


async def _reads_the_standby() -> bool:
    async with db.read_session() as session:
        return bool((await session.execute(text("SELECT pg_is_in_recovery()"))).scalar_one())


async def _bodies(client: httpx.AsyncClient, paths: tuple[str, ...]) -> dict[str, str]:
    bodies = {}
    for path in paths:
        response = await client.get(path)
        assert response.status_code in (200, 404), (path, response.status_code)
        bodies[path] = response.text
    return bodies


def _absent(bodies: dict[str, str], marks: tuple[str, ...], what: str) -> None:
    for path, body in bodies.items():
        for mark in marks:
            assert mark not in body, (what, path, mark)


async def test_takedowns_hold_at_the_next_request_while_the_standby_has_not_replayed_them(
    client: httpx.AsyncClient,
    real_replica: Standby,
    forge: Forge,  # noqa: F811 (the fixture imported above)
) -> None:
    world = World()
    await world.build()
    p = await published()
    headers = await bearer(await verified_maintainer(forge, p.repository, handle="keeper"))
    made = await state(client, p.canonical, headers, status="not_affected", impact_statement=IMPACT,
                       justification="vulnerable_code_not_in_execute_path")  # fmt: skip
    assert made.status_code == 201, made.text
    repo = f"/repos/{p.slug}"
    statement_surfaces = (f"/findings/{p.occurrence}", f"/findings/{p.occurrence}.json", f"{repo}.json",
                          f"{repo}/findings.sarif", f"{repo}/vex.json", f"{repo}/reports.atom")  # fmt: skip
    caught_up(real_replica)
    client.cookies.clear()  # anonymous reads, no read-your-writes mark

    behind = _skips("behind_takedown")
    before = await _bodies(client, (*SURFACES, *statement_surfaces))
    assert any(mark in body for body in before.values() for mark in world.report_marks)
    assert any(IMPACT in before[path] for path in statement_surfaces)
    assert _skips("behind_takedown") == behind and await _reads_the_standby(), "caught up: reads use the standby"

    pause_replay(real_replica)
    await restrict(world)  # acknowledged: committed on the primary, the standby does not replay it
    _absent(await _bodies(client, SURFACES), world.report_marks, "restriction")
    assert _skips("behind_takedown") > behind

    hide = await change_statement_visibility(world.moderator, made.json()["statement"]["id"], "hidden", REASON, NOTES)
    assert hide.audit_event_id
    _absent(await _bodies(client, statement_surfaces), (IMPACT,), "statement hide")

    await quarantine(world)
    world.secret_marks = (*world.report_marks, "hushco", "vaultrepo", world.secret_scan.commit_sha)
    _absent(await _bodies(client, SURFACES), world.secret_marks, "quarantine")
    assert (await client.get("/repos/github.com/hushco/vaultrepo.json")).status_code == 404
    stale = await _on_standby_async(real_replica, "SELECT listing_status FROM repositories WHERE name = 'vaultrepo'")
    assert stale == "listed", "the standby still holds the listed repository: the reads above did not use it"

    _on_standby(real_replica, "SELECT pg_wal_replay_resume()")
    caught_up(real_replica)
    behind = _skips("behind_takedown")
    _absent(await _bodies(client, SURFACES), world.secret_marks, "after the replay")
    assert _skips("behind_takedown") == behind and await _reads_the_standby(), "caught up again: back on the standby"


async def test_a_standby_that_replayed_a_higher_audit_id_but_not_an_older_takedown_is_not_read(
    client: httpx.AsyncClient, real_replica: Standby
) -> None:
    """Two overlapping takedowns: the one that allocated the lower audit id commits last. A standby that replayed the
    other one shows the primary's highest audit id, yet still shows the first repository: the fence (commit order)
    sends the reads to the primary."""
    primary = os.environ["DATABASE_URL"]
    await _add_repository(primary, "widget", "first words")
    await _add_repository(primary, "gadget", "second words")
    first, second = await db_repository("widget"), await db_repository("gadget")
    moderator = await make_account("mod", platform_role="moderator")
    caught_up(real_replica)
    assert await description(client) == "first words" and await _reads_the_standby()

    held, high = await overlapping_takedowns(first, second, moderator)
    caught_up(real_replica)  # the standby replayed the second takedown, the highest audit id there is
    pause_replay(real_replica)
    await held.commit()  # acknowledged on the primary, not replayed
    assert _on_standby(real_replica, "SELECT max(id) FROM audit_events") == high, "the ids say it is caught up"
    behind = _skips("behind_takedown")
    assert await description(client) is None, "the first takedown holds at the next request"
    assert _skips("behind_takedown") > behind and not await _reads_the_standby()
    assert _on_standby(real_replica, "SELECT listing_status FROM repositories WHERE name = 'widget'") == "listed"

    _on_standby(real_replica, "SELECT pg_wal_replay_resume()")
    caught_up(real_replica)
    assert await description(client) is None and await _reads_the_standby(), "replayed: back on the standby"


async def db_repository(name: str) -> Repository:
    async with db.read_session(replica=False) as session:
        repository = (await session.execute(select(Repository).where(Repository.name == name))).scalar_one()
    return repository


async def _on_standby_async(server: Standby, sql: str) -> object:
    async with await psycopg.AsyncConnection.connect(_plain_url(server.url), autocommit=True) as conn:
        row = await (await conn.execute(sql)).fetchone()
        return None if row is None else row[0]


# ---- bounded staleness and recovery conflicts ----------------------------------------------------------------------


def _on_primary_synchronously(*statements: str) -> None:
    """Run on the primary with synchronous_commit on, so its WAL reaches the standby now (the suite's primary runs
    with it off)."""
    with psycopg.connect(_plain_url(os.environ["DATABASE_URL"]), autocommit=True) as conn:
        conn.execute("SET synchronous_commit = on")
        for sql in statements:
            conn.execute(sql)


def _lag_on_metrics(body: str) -> float:
    [family] = [f for f in text_string_to_metric_families(body) if f.name == "tarakan_replica_lag_seconds"]
    return float(family.samples[0].value)


async def test_a_standby_further_behind_than_the_bound_is_skipped_until_it_catches_up(
    client: httpx.AsyncClient, real_replica: Standby, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_REPLICA_MAX_LAG", "0.3")
    monkeypatch.setenv("METRICS_ALLOW", "203.0.113.7/32")  # the test client's address
    monkeypatch.setattr(db, "REPLICA_PROBE_SECONDS", 0.0)  # every read looks again (the default: once a second)
    await _add_repository(os.environ["DATABASE_URL"], "widget", "first words")
    caught_up(real_replica)
    gauges.forget_readings()
    assert _lag_on_metrics((await client.get("/metrics")).text) == 0.0, "replayed all it received: no lag"
    lagging = _skips("lagging")
    assert await description(client) == "first words" and await _reads_the_standby()

    pause_replay(real_replica)
    _on_primary_synchronously("UPDATE repositories SET description = 'second words' WHERE name = 'widget'")
    time.sleep(0.4)  # received, not replayed, for longer than the bound
    assert await description(client) == "second words", "a replica behind its bound is skipped"
    assert not await _reads_the_standby()
    assert _skips("lagging") >= lagging + 2
    gauges.forget_readings()
    assert _lag_on_metrics((await client.get("/metrics")).text) > 0.3

    _on_standby(real_replica, "SELECT pg_wal_replay_resume()")
    caught_up(real_replica)
    lagging = _skips("lagging")
    assert await description(client) == "second words" and await _reads_the_standby(), "caught up: used again"
    assert _skips("lagging") == lagging
    assert await _lag_settles_to_zero(client, real_replica)


async def _lag_settles_to_zero(client: httpx.AsyncClient, standby: Standby) -> bool:
    """The gauge reads 0 once the standby has replayed all it received. WAL the primary writes on its own (a
    standby snapshot record every 15 s, autovacuum) can arrive between a catch-up and the scrape: a moment of
    received-not-replayed, so the scrape is tried again after another catch-up, for a few seconds at most."""
    for _ in range(20):
        gauges.forget_readings()
        if _lag_on_metrics((await client.get("/metrics")).text) == 0.0:
            return True
        caught_up(standby)
        await asyncio.sleep(0.1)
    return False


@pytest.fixture
def quick_conflicts(real_replica: Standby) -> Iterator[Standby]:
    """The standby cancels a conflicting query after 100 ms instead of 30 s."""
    _on_standby(real_replica, "ALTER SYSTEM SET max_standby_streaming_delay = '100ms'")
    _on_standby(real_replica, "SELECT pg_reload_conf()")
    try:
        yield real_replica
    finally:
        _on_standby(real_replica, "ALTER SYSTEM RESET max_standby_streaming_delay")
        _on_standby(real_replica, "SELECT pg_reload_conf()")


async def test_a_recovery_conflict_on_the_standby_is_retried_on_the_primary_never_a_500(
    client: httpx.AsyncClient, quick_conflicts: Standby, monkeypatch: pytest.MonkeyPatch
) -> None:
    primary = os.environ["DATABASE_URL"]
    await _add_repository(primary, "widget", "primary copy")
    await _add_repository(primary, "doomed", "deleted, then vacuumed away")
    caught_up(quick_conflicts)
    await description(client)  # warm: the replica's state is known, its pool open

    original, slowed = db._read_session, list[bool]()

    @asynccontextmanager
    async def slow_first_replica_read(*, replica: bool, transaction: bool) -> AsyncIterator[AsyncSession]:
        # every read session opens here, a request's shared one (`db.shared_reads`) too
        async with original(replica=replica, transaction=transaction) as session:
            if replica and not slowed:  # a long public read: its snapshot predates the primary's vacuum
                slowed.append(True)
                await session.execute(text("SELECT pg_sleep(3)"))
            yield session

    monkeypatch.setattr(db, "_read_session", slow_first_replica_read)
    conflicts = REPLICA_CONFLICTS._value.get()
    request = asyncio.create_task(client.get(WIDGET))
    deadline = time.monotonic() + 5
    while (
        _on_standby(quick_conflicts, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%'") == 0
    ):
        assert time.monotonic() < deadline and not request.done(), "the long read did not start on the standby"
        await asyncio.sleep(0.01)
    await asyncio.to_thread(
        _on_primary_synchronously, "DELETE FROM repositories WHERE name = 'doomed'", "VACUUM repositories"
    )
    started = time.monotonic()
    response = await request
    assert response.status_code == 200, response.text
    assert response.json()["repository"]["description"] == "primary copy"
    assert time.monotonic() - started < 2.5, "canceled by the conflict, not waited out"
    assert REPLICA_CONFLICTS._value.get() == conflicts + 1
