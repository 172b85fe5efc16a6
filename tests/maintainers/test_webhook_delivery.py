"""Webhook delivery (docs/domain.md "Webhooks"): every change-feed entry about the repository reaches a receiver on
loopback once per delivery id, in seq order, signed; retries on the schedule and the 24-hour disable (stored
timestamps moved instead of waiting); a name that turns private after registration is refused at connect time;
TLS is verified against the name, not the address it was pinned to; a real worker killed mid-delivery loses
nothing."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from openapi_schema_validator import OAS31Validator

from app.accounts.models import Account
from app.feed.entries import rendered_entry
from app.kernel import queue
from app.maintainers import delivery, destinations, webhook_queue, webhooks
from app.maintainers.statements import record_statement, validate_statement
from app.moderation import service as moderation
from app.registry.models import Repository
from app.site.openapi import DOCUMENT
from tests import factories
from tests.harness import spawn, stop
from tests.maintainers.statement_support import bearer, published, state, verified_maintainer
from tests.maintainers.support import Forge
from tests.maintainers.webhook_support import Receiver, maintainer, verify, webhooks_url
from tests.moderation.support import NOTES, SAME_ORIGIN, act_as, make_account
from tests.record.test_changes import submit
from tests.sql import execute, one, rows, scalar
from tests.statements import statements_sent

PUBLIC = ipaddress.ip_address("93.184.216.34")
LOOPBACK = ipaddress.ip_address("127.0.0.1")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    served = Receiver()
    try:
        yield served
    finally:
        served.close()


@pytest.fixture
def allow_private(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEBHOOK_ALLOW_PRIVATE", "1")


@pytest.fixture
async def empty_queue() -> AsyncIterator[None]:
    redis = await queue.pool()
    await redis.flushdb()
    yield
    await redis.flushdb()


async def registered(repo: Repository, url: str) -> tuple[Account, webhooks.Registered]:
    owner, _ = await maintainer(repo)
    return owner, await webhooks.register_webhook(owner.id, repo.host, repo.owner, repo.name, url)


async def run() -> delivery.RunResult:
    return await delivery.run(rendered_entry, lanes=2)


async def deliveries(webhook_id: int) -> list[dict[str, Any]]:
    return await rows("SELECT * FROM webhook_deliveries WHERE webhook_id = :w ORDER BY seq", w=webhook_id)


async def feed_entries_of(webhook_id: int) -> list[dict[str, Any]]:
    """The entries a webhook's deliveries carry, as the change feed renders them now."""
    found = [await rendered_entry(int(d["seq"])) for d in await deliveries(webhook_id)]
    return [entry for entry in found if entry is not None]


async def seqs() -> list[int]:
    return [int(r["seq"]) for r in await rows("SELECT seq FROM changes ORDER BY seq")]


async def move_to_next_attempt(webhook_id: int) -> timedelta:
    """Let the time until the head's next attempt pass (the streak's start moves back as far); returns how long
    that was."""
    head = await one(
        "SELECT d.id, d.next_attempt_at - now() AS wait FROM webhook_deliveries d "
        "WHERE d.webhook_id = :w AND d.next_attempt_at IS NOT NULL",
        w=webhook_id,
    )
    assert head is not None
    wait: timedelta = head["wait"]
    await execute("UPDATE webhooks SET failing_since = failing_since - :wait WHERE id = :w", wait=wait, w=webhook_id)
    await execute("UPDATE webhook_deliveries SET next_attempt_at = now() WHERE id = :id", id=head["id"])
    return wait


def assert_received_in_order(receiver: Receiver, expected: list[dict[str, Any]], secret: str) -> None:
    """Every entry once per delivery id, in seq order, as the feed renders it, with a signature that verifies."""
    assert all(item.signed_with(secret) for item in receiver.received)
    kept = receiver.delivered()
    assert [item.json["entry"] for item in kept] == expected
    assert [item.headers["x-tarakan-event"] for item in kept] == [e["kind"] for e in expected]
    assert all(item.json["delivery"] == item.delivery for item in kept)
    assert all(item.headers["content-type"] == "application/json" for item in kept)
    # the body is what the OpenAPI document's `webhooks` says a receiver gets
    described = DOCUMENT["webhooks"]["change"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    validator = OAS31Validator(described | {"components": DOCUMENT["components"]})
    for item in kept:
        validator.validate(item.json)


async def test_fails_twice_then_succeeds_every_entry_once_in_order_and_signed(
    receiver: Receiver, allow_private: None
) -> None:
    repo = await factories.create_repository()
    _, hook = await registered(repo, receiver.url)
    agent = await make_account("agent")
    report = await submit(agent, repo, "SQL injection in login", "Path traversal in upload")
    other = await factories.create_repository()
    await submit(agent, other, "Someone else's finding")  # another repository: none of its entries is delivered
    receiver.answers = [500, 500]

    first = await run()
    assert first.outcomes == {"failed": 1}
    [head, *queued] = await deliveries(hook.webhook.id)
    assert (head["attempts"], head["last_status"], head["delivered_at"]) == (1, 500, None)
    assert {d["next_attempt_at"] for d in queued} == {None}  # later entries wait for the first
    assert [d["kind"] for d in [head, *queued]] == [
        "repository.listed",
        "finding.published",
        "finding.published",
        "finding.status",
        "finding.status",
    ]
    assert timedelta(seconds=4) < await move_to_next_attempt(hook.webhook.id) <= timedelta(seconds=5)

    assert (await run()).outcomes == {"failed": 1}
    assert timedelta(seconds=29) < await move_to_next_attempt(hook.webhook.id) <= timedelta(seconds=30)

    third = await run()
    assert third.outcomes == {"delivered": 5} and third.backlog.pending == 0
    assert len(receiver.received) == 7  # two 500s of the first entry, then each entry once
    assert len({item.delivery for item in receiver.received[:3]}) == 1  # the same delivery id on every retry
    expected = await feed_entries_of(hook.webhook.id)
    assert [e["kind"] for e in expected] == [d["kind"] for d in await deliveries(hook.webhook.id)]
    assert_received_in_order(receiver, expected, hook.secret)
    theirs = {f["public_id"] for f in report["findings"]}
    assert {e["finding"] for e in expected if "finding" in e} == theirs
    state = await one("SELECT * FROM webhooks WHERE id = :w", w=hook.webhook.id)
    assert state is not None
    assert (state["failing_since"], state["consecutive_failures"]) == (None, 0)
    assert state["last_delivered_seq"] == max(d["seq"] for d in await deliveries(hook.webhook.id))

    # a takedown after delivery: the next entry (the withdrawal) is delivered, and every body renders from now
    moderator = await make_account("mod", platform_role="moderator")
    await moderation.change_scan_visibility(moderator, report["id"], "restricted", "takedown", NOTES)
    assert (await run()).outcomes == {"delivered": 2}
    withdrawn = [item.json["entry"] for item in receiver.delivered()[5:]]
    assert [e["kind"] for e in withdrawn] == ["finding.withdrawn", "finding.withdrawn"]
    assert {e["finding"] for e in withdrawn} == theirs and {e["reason"] for e in withdrawn} == {"moderation"}


async def test_with_no_webhook_registered_the_fan_out_moves_its_cursor_without_reading_the_entries() -> None:
    agent = await make_account("agent")
    assert await webhook_queue.fan_out() == 0  # the cursor, at the feed's head
    for title in ("Nobody listens", "Nobody listens either"):
        await submit(agent, await factories.create_repository(), title)
    with statements_sent() as sent:
        assert await webhook_queue.fan_out(batch=1) == 0  # more entries than a batch: still one transaction
    assert [s for s in sent if "WITH entries" in s] == []  # a run rung after every report reads none of them
    assert len(sent) == 4, sent  # the cursor's row ensured and locked, the head, the move
    assert await scalar("SELECT seq FROM webhook_fanout") == max(await seqs())


async def test_the_fan_out_routes_entries_by_repository_from_registration_on_while_the_owner_maintains_it(
    allow_private: None,
) -> None:
    agent = await make_account("agent")
    repo = await factories.create_repository()
    await submit(agent, repo, "Before the webhook")  # committed before registration: not delivered
    owner, hook = await registered(repo, "http://127.0.0.1:9/hook")
    report = await submit(agent, repo, "After the webhook")
    assert await webhook_queue.fan_out() == 2  # the new finding's published and status entries
    assert await webhook_queue.fan_out() == 0  # idempotent: the cursor moved
    assert [d["kind"] for d in await deliveries(hook.webhook.id)] == ["finding.published", "finding.status"]
    # the maintainer's statement (written by the statement service, not the outbox)
    canonical = report["findings"][0]["canonical_public_id"]
    said = validate_statement({"status": "not_affected", "justification": "component_not_present"})
    await record_statement(owner.id, canonical, said)
    assert await webhook_queue.fan_out() == 1
    statement = (await deliveries(hook.webhook.id))[-1]
    assert statement["kind"] == "finding.statement"
    entry = await rendered_entry(statement["seq"])
    assert entry is not None and (entry["canonical"], entry["status"]) == (canonical, "not_affected")

    await execute("UPDATE repository_maintainers SET ended_at = now(), ended_reason = 'moderation'")
    await submit(agent, repo, "After the maintainership ended")
    assert await webhook_queue.fan_out() == 0
    assert len(await deliveries(hook.webhook.id)) == 3
    assert await scalar("SELECT seq FROM webhook_fanout") == max(await seqs())


async def test_a_receiver_that_always_fails_disables_the_webhook_until_enabled_again(
    receiver: Receiver, allow_private: None
) -> None:
    repo = await factories.create_repository()
    owner, hook = await registered(repo, receiver.url)
    await submit(await make_account("agent"), repo, "SQL injection in login")
    receiver.answers = [503] * 100

    waits: list[int] = []
    while (await run()).outcomes == {"failed": 1}:
        waits.append(round((await move_to_next_attempt(hook.webhook.id)).total_seconds()))
        if len(waits) == 7:  # hourly from here: skip to 23.5 hours after the first failure
            await execute("UPDATE webhooks SET failing_since = now() - interval '23 hours 30 minutes'")
        assert len(waits) < 10
    assert waits == [5, 30, 120, 600, 1800, 3600, 3600, 1800]  # the last wait cut short: a try at 24 hours
    state = await one("SELECT * FROM webhooks WHERE id = :w", w=hook.webhook.id)
    assert state is not None and state["disabled_at"] is not None
    # (the test's own run time is in the streak too: the stored times moved back only by the waits)
    assert timedelta(hours=24) <= state["disabled_at"] - state["failing_since"] < timedelta(hours=24, seconds=30)
    assert (await webhooks.get_webhook(owner.id, hook.webhook.id)).disabled_at == state["disabled_at"]
    assert {d["next_attempt_at"] for d in await deliveries(hook.webhook.id)} == {None}  # nothing is due
    tried = len(receiver.received)
    await submit(await make_account("agent2"), repo, "Path traversal in upload")  # queued while disabled
    assert (await run()).outcomes == {}
    assert len(receiver.received) == tried and len(await deliveries(hook.webhook.id)) == 5

    receiver.answers = []
    enabled = await webhooks.enable_webhook(owner.id, hook.webhook.id)
    assert (enabled.disabled_at, enabled.failing_since, enabled.consecutive_failures) == (None, None, 0)
    assert (await run()).outcomes == {"delivered": 5}  # the failed entry first, then the rest in order
    kept = receiver.delivered()
    assert [item.json["entry"]["seq"] for item in kept] == sorted(item.json["entry"]["seq"] for item in kept)
    assert len(kept) == 5


async def test_the_connect_time_check_refuses_a_name_that_resolves_private_at_delivery(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers = {"hooks.example": [PUBLIC]}
    asked: list[str] = []

    async def resolver(host: str, port: int) -> list[destinations.Address]:
        asked.append(host)
        return answers[host]

    monkeypatch.setattr(destinations, "resolver", resolver)
    repo = await factories.create_repository()
    _, hook = await registered(repo, "https://hooks.example:8443/hook")
    await submit(await make_account("agent"), repo, "SQL injection in login")
    answers["hooks.example"] = [LOOPBACK]  # DNS rebinding: the name now points inside

    assert (await run()).outcomes == {"failed": 1}
    [head, *_] = await deliveries(hook.webhook.id)
    assert head["last_status"] is None
    # refused before any connection (a connection that failed would read `unreachable`)
    assert head["last_error"] == "refused destination: its host is or resolves only to refused addresses (loopback)"
    assert asked == ["hooks.example", "hooks.example"]  # resolved again at connect time

    # public and inside addresses together: only a public one is ever connected to
    answers["hooks.example"] = [LOOPBACK, PUBLIC]
    assert await destinations.connect_address(destinations.parse(hook.webhook.url)) == PUBLIC


async def test_from_a_verified_claim_to_a_signed_statement_delivery_and_a_moderators_hide(
    client: httpx.AsyncClient, forge: Forge, receiver: Receiver, allow_private: None
) -> None:
    p = await published()
    keeper = await verified_maintainer(forge, p.repository, handle="keeper")
    headers = await bearer(keeper)
    made = await client.post(webhooks_url(p.repository), headers=headers, json={"url": receiver.url})
    assert made.status_code == 201, made.text
    secret = made.json()["webhook"]["secret"]
    said = await state(client, p.canonical, headers, status="not_affected", justification="component_not_present")
    assert said.status_code == 201, said.text

    assert (await run()).outcomes == {"delivered": 1}
    [statement] = receiver.delivered()
    assert statement.signed_with(secret) and statement.headers["x-tarakan-event"] == "finding.statement"
    entry = statement.json["entry"]
    assert (entry["canonical"], entry["status"], entry["justification"]) == (
        p.canonical,
        "not_affected",
        "component_not_present",
    )

    moderator = await make_account("mod", platform_role="moderator")
    await act_as(client, moderator)
    hidden = await client.post(
        f"/moderation/statements/{said.json()['statement']['id']}",
        headers=SAME_ORIGIN,
        data={"visibility": "hidden", "reason": "defamatory", "notes": NOTES},
    )
    assert hidden.status_code == 303, hidden.text
    assert (await run()).outcomes == {"delivered": 1}
    hide = receiver.delivered()[1]
    assert hide.signed_with(secret) and hide.json["entry"]["canonical"] == p.canonical
    assert "status" not in hide.json["entry"]  # rendered from now: the statement is hidden
    assert await rendered_entry(entry["seq"]) == {k: entry[k] for k in ("seq", "at", "kind", "canonical")}


async def test_each_attempt_is_signed_with_its_own_timestamp_so_a_replay_fails_the_five_minute_check(
    receiver: Receiver, allow_private: None
) -> None:
    repo = await factories.create_repository()
    _, hook = await registered(repo, receiver.url)
    await submit(await make_account("agent"), repo, "SQL injection in login")
    receiver.answers = [500]
    assert (await run()).outcomes == {"failed": 1}
    await move_to_next_attempt(hook.webhook.id)
    await asyncio.sleep(1.1)  # the retry comes a second later
    assert (await run()).outcomes == {"delivered": 3}

    documented = {
        p["name"].lower(): re.compile(p["schema"]["pattern"])
        for p in DOCUMENT["webhooks"]["change"]["post"]["parameters"]
        if "pattern" in p["schema"]
    }
    assert {"x-tarakan-timestamp", "x-tarakan-signature-v2", "x-tarakan-signature-256"} <= set(documented)
    for item in receiver.received:
        timestamp = int(item.headers["x-tarakan-timestamp"])
        assert item.at - 2 <= timestamp <= item.at  # the attempt's own time, in Unix seconds
        assert verify(hook.secret, item.headers, item.body, now=item.at)
        assert item.signed_with(hook.secret)  # X-Tarakan-Signature-256 as it always was: over the body alone
        assert all(documented[name].fullmatch(item.headers[name]) for name in documented)
    first, retry = receiver.received[:2]
    assert first.delivery == retry.delivery and first.body == retry.body
    assert int(retry.headers["x-tarakan-timestamp"]) > int(first.headers["x-tarakan-timestamp"])
    assert retry.headers["x-tarakan-signature-v2"] != first.headers["x-tarakan-signature-v2"]

    # a captured delivery replayed six minutes later fails the receiver's check, and so does one whose timestamp
    # was changed to look fresh (the signature covers it)
    later = first.at + 360
    assert not verify(hook.secret, first.headers, first.body, now=later)
    refreshed = {**first.headers, "x-tarakan-timestamp": str(int(later))}
    assert not verify(hook.secret, refreshed, first.body, now=later)


async def test_every_failure_to_connect_reads_unreachable_and_a_status_keeps_its_number(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, allow_private: None
) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()  # nothing listens: the connection is refused
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()  # takes the connection, never speaks TLS: the handshake times out
    monkeypatch.setattr(delivery, "CONNECT_SECONDS", 0.5)
    names = {"receiver.test": [LOOPBACK]}

    async def resolver(host: str, port: int) -> list[destinations.Address]:
        if host not in names:
            raise OSError("Name or service not known")
        return names[host]

    monkeypatch.setattr(destinations, "resolver", resolver)
    try:
        failures = {
            "connection refused": f"http://127.0.0.1:{closed_port}/hook",
            "TLS handshake timed out": f"https://127.0.0.1:{silent.getsockname()[1]}/hook",
            "TLS to a plain-http server": f"https://receiver.test:{receiver.port}/hook",
            "name not resolved": "https://nowhere.test/hook",
        }
        for what, url in failures.items():
            assert await delivery.post(url, b"{}", {}) == delivery.Sent(None, "unreachable"), what
    finally:
        silent.close()
    receiver.answers = [503]
    assert await delivery.post(receiver.url, b"{}", {}) == delivery.Sent(503)

    # as the owner reads it in the delivery log
    repo = await factories.create_repository()
    _, hook = await registered(repo, f"http://127.0.0.1:{closed_port}/hook")
    await submit(await make_account("agent"), repo, "SQL injection in login")
    caplog.set_level(logging.INFO, logger=delivery.__name__)
    assert (await run()).outcomes == {"failed": 1}
    [head, *_] = await deliveries(hook.webhook.id)
    assert (head["last_status"], head["last_error"]) == (None, "unreachable")
    assert "failed (unreachable: ConnectError" in caplog.text  # what happened: for the operator's log only


async def test_dns_has_a_few_threads_of_its_own_and_a_saturated_resolver_fails_fast_then_retries(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch, allow_private: None
) -> None:
    repo = await factories.create_repository()
    _, hook = await registered(repo, f"http://localhost:{receiver.port}/hook")  # a name: the system resolver
    await submit(await make_account("agent"), repo, "SQL injection in login")
    release = threading.Event()
    started: list[str] = []

    def stuck(host: str, port: int, **_: Any) -> Any:  # a system resolver that does not answer (a dead DNS server)
        started.append(threading.current_thread().name)
        release.wait(30)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(destinations, "getaddrinfo", stuck)
    monkeypatch.setattr(destinations, "RESOLVE_SECONDS", 0.3)
    loop = asyncio.get_running_loop()
    try:
        # as many stuck lookups as the pool has threads: each caller is freed at its timeout, its thread is not
        stuck_ones = [f"stuck{i}.test" for i in range(destinations.DNS_THREADS)]
        timed_out = await asyncio.gather(
            *(destinations.system_resolver(name, 443) for name in stuck_ones), return_exceptions=True
        )
        assert all(isinstance(e, TimeoutError) for e in timed_out), timed_out
        assert len(started) == destinations.DNS_THREADS and all(n.startswith("webhook-dns") for n in started)
        # asyncio's default executor is not theirs: other work still gets a thread
        assert await loop.run_in_executor(None, lambda: 42) == 42

        began = time.monotonic()
        result = await run()  # the delivery's lookup: no thread free, it fails at once and waits for its retry
        assert time.monotonic() - began < 2
        assert result.outcomes == {"failed": 1} and len(started) == destinations.DNS_THREADS
        [head, *_] = await deliveries(hook.webhook.id)
        assert (head["last_error"], head["attempts"]) == ("unreachable", 1)
        assert timedelta(seconds=4) < await move_to_next_attempt(hook.webhook.id) <= timedelta(seconds=5)
    finally:
        release.set()
    monkeypatch.setattr(destinations, "getaddrinfo", socket.getaddrinfo)

    async def lookups_run() -> bool:  # the stuck lookups returned: their threads take lookups again
        try:
            return bool(await destinations.system_resolver("localhost", 443))
        except destinations.ResolverBusy:
            return False

    await wait_until(lookups_run, "the lookup threads to come back")
    assert (await run()).outcomes == {"delivered": 3}  # the retry, then the rest in order
    assert len(receiver.delivered()) == 3


# --- TLS: the pinned address, verified against the name ------------------------------------------------------------


def _certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A throw-away CA and a certificate for `hooks.test` signed by it (openssl)."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=Test CA")
    openssl("req", *ec, "-keyout", "hook.key", "-out", "hook.csr", "-subj", "/CN=hooks.test")
    (directory / "san.ext").write_text("subjectAltName=DNS:hooks.test\n")
    openssl(
        "x509", "-req", "-in", "hook.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "hook.pem", "-days", "1", "-extfile", "san.ext",
    )  # fmt: skip
    return directory / "ca.pem", directory / "hook.pem", directory / "hook.key"


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
async def test_tls_is_verified_against_the_name_while_the_connection_goes_to_the_checked_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, allow_private: None
) -> None:
    ca, cert, key = await asyncio.to_thread(_certificates, tmp_path)
    seen: list[tuple[str | None, str]] = []  # (TLS server name, Host header)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            seen.append((getattr(self.connection, "server_name", None), self.headers["Host"]))
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            return

    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)

    def remember_name(sock: ssl.SSLObject, name: str, _: ssl.SSLContext) -> None:
        sock.server_name = name  # type: ignore[attr-defined]

    server_tls.sni_callback = remember_name
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = server_tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]

    async def resolver(host: str, port: int) -> list[destinations.Address]:
        return [LOOPBACK]  # both names point at the test server

    monkeypatch.setattr(destinations, "resolver", resolver)
    monkeypatch.setattr(delivery, "tls_context", ssl.create_default_context(cafile=str(ca)))
    try:
        good = await delivery.post(f"https://hooks.test:{port}/hook", b"{}", {})
        assert good.status == 204, good
        assert seen == [("hooks.test", f"hooks.test:{port}")]
        wrong = await delivery.post(f"https://other.test:{port}/hook", b"{}", {})
        assert (wrong.status, wrong.error) == (None, "unreachable")  # a TLS failure reads as any other
        assert len(seen) == 1
    finally:
        server.shutdown()
        server.server_close()


# --- a real worker, killed mid-delivery --------------------------------------------------------------------------


async def wait_until(check: Any, what: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_a_worker_killed_mid_delivery_loses_nothing_and_sends_each_entry_in_order(
    receiver: Receiver, empty_queue: None, allow_private: None
) -> None:
    repo = await factories.create_repository()
    _, hook = await registered(repo, receiver.url)
    await submit(await make_account("agent"), repo, "SQL injection in login", "Path traversal in upload")
    receiver.answers = [500, 500]
    webhook_id = hook.webhook.id

    worker = spawn("worker", env={"WEBHOOK_ALLOW_PRIVATE": "1"})
    try:
        for failures in (1, 2):

            async def settled(n: int = failures) -> bool:  # the failure is recorded and its retry scheduled
                streak = await scalar("SELECT consecutive_failures FROM webhooks WHERE id = :w", w=webhook_id)
                return len(receiver.received) == n and streak == n

            await wait_until(settled, f"failure {failures}")
            if failures == 2:
                receiver.hang = True  # the third attempt: the worker dies while the receiver holds it
            await move_to_next_attempt(webhook_id)
            await queue.enqueue_webhooks()
        assert await asyncio.to_thread(receiver.hanging.wait, 15), "the third attempt never came"
        worker.send_signal(signal.SIGKILL)
        await asyncio.to_thread(worker.wait, 10)
    finally:
        stop(worker)
    receiver.release.set()
    leased = await one(
        "SELECT attempts, next_attempt_at > now() AS leased FROM webhook_deliveries ORDER BY seq LIMIT 1"
    )
    assert leased == {"attempts": 3, "leased": True}  # still the worker's until its lease ends
    await execute("UPDATE webhook_deliveries SET next_attempt_at = now() WHERE next_attempt_at > now()")  # it ended

    # what a restarted worker does (tests/ops/test_worker.py starts real ones): a run sends it again, same id
    assert (await run()).outcomes == {"delivered": 5}

    assert [item.status for item in receiver.received[:4]] == [500, 500, None, 200]
    assert len({item.delivery for item in receiver.received[:4]}) == 1
    assert len(receiver.received) == 8  # the first entry four times, the four others once
    expected = await feed_entries_of(webhook_id)
    assert len(expected) == 5
    assert_received_in_order(receiver, expected, hook.secret)
    assert (await deliveries(webhook_id))[0]["attempts"] == 4


def test_the_schedule_is_5s_30s_2min_10min_30min_then_hourly() -> None:
    assert [webhook_queue.retry_delay(n).total_seconds() for n in range(1, 9)] == [
        5,
        30,
        120,
        600,
        1800,
        3600,
        3600,
        3600,
    ]
    assert timedelta(hours=24) == webhook_queue.DISABLE_AFTER
