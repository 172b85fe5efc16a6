"""Read-replica routing: public reads go to DATABASE_REPLICA_URL, moderator pages and the request right after a
moderator's write read the primary.

Two kinds of replica: a second database on the test server (`replica_probe`, migrated like the primary) that holds
different rows than the primary, so which copy a page shows says which database it read; and a real hot standby of
the test primary (`standby` in tests/conftest.py: streaming replication, started on first use), whose replay the
tests pause (`pg_wal_replay_pause()`) to make it lag on purpose.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import httpx
import psycopg
import pytest
from bs4 import BeautifulSoup
from sqlalchemy import text
from sqlalchemy.engine import make_url

from app.accounts.models import Account
from app.accounts.service import create_token
from app.devservices import Standby
from app.kernel import db
from app.kernel.config import normalize_database_url
from app.kernel.metrics import REPLICA_FALLBACKS
from app.kernel.security import READ_YOUR_WRITES_COOKIE
from app.migrate import upgrade_to_head
from tests.conftest import _plain_url, caught_up
from tests.moderation.support import NOTES, SAME_ORIGIN, act_as, make_account
from tests.reports.support import report_body

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
        row = conn.execute(sql).fetchone()
        return None if row is None else row[0]


@pytest.fixture
async def real_replica(standby: Standby, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Standby]:
    """DATABASE_REPLICA_URL -> the session's hot standby, caught up with the (freshly truncated) primary; replay is
    resumed and the standby caught up again at the end, whatever the test did."""
    if standby.proc is None or standby.proc.poll() is not None:
        standby.start()
    caught_up(standby)
    db._replica_down_until.clear()
    monkeypatch.setenv("DATABASE_REPLICA_URL", standby.url)
    try:
        yield standby
    finally:
        await db.dispose_engines(normalize_database_url(standby.url))
        db._replica_down_until.clear()
        if standby.proc is None or standby.proc.poll() is not None:
            standby.start()
        _on_standby(standby, "SELECT pg_wal_replay_resume()")
        caught_up(standby)


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
    real_replica.stop()
    await db.dispose_engines(normalize_database_url(real_replica.url))  # the pool's connections died with it
    before = REPLICA_FALLBACKS._value.get()
    assert await description(client) == "primary copy"
    assert await description(client) == "primary copy"
    assert REPLICA_FALLBACKS._value.get() >= before + 2, "every read that went to the primary instead is counted"
    async with db.read_session() as session:
        assert (await session.execute(text("SELECT pg_is_in_recovery()"))).scalar_one() is False
