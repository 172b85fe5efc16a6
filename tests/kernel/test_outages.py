"""Dependency outages in one process (docs/reliability.md): with Postgres unreachable every kind of route answers
a 503 with Retry-After in its own format, writes store nothing, the failures are counted and logged once per
interval; a dead replica falls back to the primary; the pool's wait and the statement timeout are bounded; a
stream that fails after its 200 is aborted, never finished.

"Unreachable" is a DATABASE_URL on a loopback port nobody listens on (a stopped server answers the same way:
connection refused); tests/system/test_faults.py restarts real servers under a real `serve` and `worker`."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import psycopg
import pytest
from prometheus_client import REGISTRY
from sqlalchemy import exc as sa_exc
from sqlalchemy import text
from starlette.types import Message

from app.accounts.sessions import COOKIE_NAME
from app.devservices import free_port
from app.kernel import db, outages
from app.kernel.config import settings
from app.kernel.web import _AbortableStream
from tests import factories
from tests.moderation.support import SAME_ORIGIN, act_as
from tests.reports.support import report_body, row_counts


def _dead_url() -> str:
    return f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/postgres"


def _count(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture
async def database_down(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[None]:
    dead = _dead_url()
    monkeypatch.setenv("DATABASE_URL", dead)
    monkeypatch.setenv("DATABASE_REPLICA_URL", dead)
    outages.reset_log_intervals()
    yield
    await db.dispose_engines(settings().database_url)


# path, what the answer must be: html (the site's error page), json (the error shape), text (feeds, sitemaps)
READS = [
    ("/", "html"),
    ("/infestations", "html"),
    ("/infestations/" + "a" * 64, "html"),
    ("/repos/github.com/acme/widget", "html"),
    ("/search?q=widget", "html"),
    ("/index.json", "json"),
    ("/infestations.json", "json"),
    ("/repos/github.com/acme/widget.json", "json"),
    ("/sitemap.xml", "text"),
    ("/sitemap/findings/1.xml", "text"),
    ("/infestations.atom", "text"),
    ("/repos/github.com/acme/widget/reports.atom", "text"),
]


def assert_unavailable(response: httpx.Response, kind: str) -> None:
    assert response.status_code == 503, (response.request.url, response.text[:200])
    assert response.headers["retry-after"] == "10"
    assert response.headers["cache-control"] == "no-store"
    content_type = response.headers["content-type"]
    if kind == "html":
        assert content_type.startswith("text/html")
        assert "Temporarily unavailable" in response.text and "try again in a few seconds" in response.text
    elif kind == "json":
        assert response.json() == {"errors": {"database": ["is temporarily unavailable; try again shortly"]}}
    else:
        assert content_type.startswith("text/plain")
        assert response.text.startswith("Temporarily unavailable: ")


@pytest.mark.parametrize(("path", "kind"), READS, ids=[p for p, _ in READS])
async def test_every_read_answers_503_with_retry_after_while_the_database_is_away(
    client: httpx.AsyncClient, database_down: None, path: str, kind: str
) -> None:
    assert_unavailable(await client.get(path), kind)


async def test_writes_answer_503_and_store_nothing_while_the_database_is_away(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.accounts.service import create_token

    account = await factories.create_account(state="active")
    moderator = await factories.create_account(handle="mod", platform_role="moderator", state="active")
    repo = await factories.create_repository("acme", "widget")
    secret = await create_token(account.id, ["findings:submit"])
    session = await act_as(client, moderator)  # a live session, opened while the database answers
    before = await row_counts()
    with monkeypatch.context() as down:
        down.setenv("DATABASE_URL", _dead_url())
        down.setenv("DATABASE_REPLICA_URL", settings().database_url)
        client.cookies.clear()
        api = await client.post(
            f"/api/v1/repos/{repo.host}/{repo.owner}/{repo.name}/reports",
            headers={"Authorization": f"Bearer {secret}"},
            content=json.dumps(report_body(run_id="during-outage")),
        )
        assert_unavailable(api, "json")
        assert session is not None
        client.cookies.set(COOKIE_NAME, session)
        listing = await client.post(
            "/moderation/repos/github.com/acme/widget/listing",
            headers=SAME_ORIGIN,
            data={"listing_status": "delisted", "notes": "Spam repository."},
        )
        assert_unavailable(listing, "html")
        client.cookies.clear()
        login = await client.post(
            "/login", headers=SAME_ORIGIN, data={"email": "mod@example.com", "password": "whatever"}
        )
        assert_unavailable(login, "html")
        await db.dispose_engines(settings().database_url)
    assert await row_counts() == before


async def test_a_report_whose_first_attempt_failed_in_an_outage_is_stored_by_its_retry(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the other case of docs/reliability.md "Retries": nothing committed, so the retry stores it (201), once
    from app.accounts.service import create_token

    account = await factories.create_account(state="active")
    repo = await factories.create_repository("acme", "widget")
    headers = {"Authorization": f"Bearer {await create_token(account.id, ['findings:submit'])}"}
    url = f"/api/v1/repos/{repo.host}/{repo.owner}/{repo.name}/reports"
    body = json.dumps(report_body(run_id="flaky-network"))
    with monkeypatch.context() as down:
        down.setenv("DATABASE_URL", _dead_url())
        assert (await client.post(url, headers=headers, content=body)).status_code == 503
        await db.dispose_engines(settings().database_url)
    retry = await client.post(url, headers=headers, content=body)
    assert retry.status_code == 201, retry.text
    assert (await row_counts())["scans"] == 1


async def test_an_outage_is_counted_per_request_and_logged_once_per_interval(
    client: httpx.AsyncClient, database_down: None, caplog: pytest.LogCaptureFixture
) -> None:
    before = _count("tarakan_dependency_failures_total", dependency="database", source="request")
    with caplog.at_level(logging.WARNING, logger="tarakan.outages"):
        for _ in range(5):
            assert (await client.get("/infestations.json")).status_code == 503
    assert _count("tarakan_dependency_failures_total", dependency="database", source="request") == before + 5
    lines = [r.getMessage() for r in caplog.records if r.name == "tarakan.outages"]
    assert len(lines) == 1, lines
    assert lines[0].startswith("database unavailable in request: OperationalError: ")
    assert not any(r.exc_info for r in caplog.records)  # no traceback


async def test_a_bug_in_sql_is_still_a_500_not_a_503() -> None:
    with pytest.raises(sa_exc.ProgrammingError) as raised:
        async with db.read_session(replica=False) as session:
            await session.execute(text("SELECT no_such_column FROM repositories"))
    assert outages.dependency_of(raised.value) is None


async def test_a_dead_replica_falls_back_to_the_primary_and_is_counted(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await factories.create_repository("acme", "widget")
    dead = _dead_url()
    monkeypatch.setenv("DATABASE_REPLICA_URL", dead)
    fallbacks = _count("tarakan_replica_fallbacks_total")
    failures = _count("tarakan_dependency_failures_total", dependency="database", source="replica")
    try:
        for _ in range(3):
            response = await client.get("/repos/github.com/acme/widget.json")
            assert response.status_code == 200, response.text
    finally:
        await db.dispose_engines(settings().database_replica_url)
        db._replica_down_until.clear()
    assert _count("tarakan_replica_fallbacks_total") >= fallbacks + 3
    # tried once, then left alone for REPLICA_RETRY_SECONDS: the reads do not each wait on the dead replica
    assert _count("tarakan_dependency_failures_total", dependency="database", source="replica") == failures + 1


@pytest.fixture
async def tiny_pool(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[None]:
    await db.dispose_engines()
    monkeypatch.setenv("DB_POOL_SIZE", "1")  # one connection plus one overflow
    monkeypatch.setenv("DB_POOL_TIMEOUT", "0.3")
    yield
    await db.dispose_engines()


async def test_a_request_waits_a_bounded_time_for_a_connection_then_answers_503(
    client: httpx.AsyncClient, tiny_pool: None
) -> None:
    async with db.engine().connect() as one, db.engine().connect() as two:
        await one.execute(text("SELECT 1"))
        await two.execute(text("SELECT 1"))
        started = time.monotonic()
        response = await client.get("/infestations.json")
        waited = time.monotonic() - started
    assert_unavailable(response, "json")
    assert 0.25 <= waited < 2, waited
    assert (await client.get("/infestations.json")).status_code == 200  # connections back: served again


async def test_the_server_caps_each_statement_and_the_cap_is_an_outage(tiny_statement_timeout: None) -> None:
    started = time.monotonic()
    with pytest.raises(sa_exc.OperationalError) as raised:
        async with db.read_session() as session:
            await session.execute(text("SELECT pg_sleep(3)"))
    assert time.monotonic() - started < 2
    assert outages.dependency_of(raised.value) == "database"


async def _run_stream(source: AsyncIterator[bytes]) -> list[Message]:
    sent: list[Message] = []

    async def receive() -> Message:
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"spec_version": "2.4"}, "method": "GET", "path": "/", "headers": []}
    await _AbortableStream(source, media_type="application/xml")(scope, receive, send)
    return sent


async def test_a_stream_that_loses_the_database_midway_is_aborted_not_finished() -> None:
    async def source() -> AsyncIterator[bytes]:
        yield b"<urlset>"
        raise sa_exc.OperationalError("SELECT", {}, psycopg.OperationalError("server closed the connection"))

    before = _count("tarakan_dependency_failures_total", dependency="database", source="stream")
    sent = await _run_stream(source())
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[1]["body"] == b"<urlset>" and sent[1]["more_body"] is True  # never the final, empty chunk
    assert _count("tarakan_dependency_failures_total", dependency="database", source="stream") == before + 1


async def test_a_whole_stream_ends_with_its_final_chunk() -> None:
    async def source() -> AsyncIterator[bytes]:
        yield b"<urlset>"
        yield b"</urlset>"

    sent = await _run_stream(source())
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


def test_outage_classes() -> None:
    from redis import exceptions as redis_exceptions

    assert outages.dependency_of(sa_exc.TimeoutError("QueuePool limit reached")) == "database"
    assert outages.dependency_of(psycopg.errors.AdminShutdown("terminating connection")) == "database"
    assert outages.dependency_of(redis_exceptions.ConnectionError("refused")) == "redis"
    assert outages.dependency_of(sa_exc.IntegrityError("INSERT", {}, psycopg.errors.UniqueViolation())) is None
    assert outages.dependency_of(ValueError("nope")) is None


@pytest.fixture(autouse=True)
def _fresh_log_intervals() -> Iterator[None]:
    outages.reset_log_intervals()
    yield


async def test_readyz_names_the_dependency_that_is_down(client: httpx.AsyncClient, database_down: None) -> None:
    response = await client.get("/readyz")
    assert response.status_code == 503 and response.headers["retry-after"] == "10"
    checks = response.json()["checks"]
    assert checks["database"].startswith("error: ") and checks["redis"] == "ok"
