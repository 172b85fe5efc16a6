"""The shared page cache as a real part (docs/scaling.md "Shared cache"): Debian's varnishd with
deploy/varnish/default.vcl in front of a live `tarakan serve` whose takedowns purge it (VARNISH_PURGE_URLS).
Through Varnish a page is served from cache (its `X-Varnish` names two requests), a quarantine (CLI) and a
restriction (console) each make every affected page a fresh fetch at the very next request while an unaffected page
stays cached, a rollup drain purges the atlas, tags never reach a client, PURGE is refused on the public listener,
PURGE and BAN work only on the listener named `purge` and from loopback on an unnamed one (a client on a private
network, in a network namespace of its own, is refused there), and a purge that fails falls back to purging
everything, counted and said."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client import REGISTRY

from app.accounts.models import Account
from app.accounts.sessions import COOKIE_NAME, open_session
from app.devservices import Varnish, free_port
from app.infestations.dirty_queue import drain_all
from app.kernel import db, purge
from app.record.outbox import mark_dirty
from app.reports.finding_memory import pattern_key
from app.reports.models import Scan, ScanFinding
from app.reports.service import submit_report
from tests import factories
from tests.harness import ARTIFACTS, spawn, stop, tarakan, wait_http
from tests.reports.support import report_body

TITLE = "Varnish-fenced open redirect"  # in repositories A (quarantined) and B (a report restricted)
KEY = pattern_key(TITLE)
OTHER_TITLE = "Varnish-kept debug endpoint"  # in C and D only: what no takedown here touches
OTHER_KEY = pattern_key(OTHER_TITLE)
REASON, NOTES = "takedown", "taken down by the shared cache test of every tagged page"


@dataclass
class Stack:
    varnish: Varnish
    server: str

    @property
    def cache(self) -> str:
        return self.varnish.url


@pytest.fixture(scope="module")
def stack(services: dict[str, str]) -> Iterator[Stack]:
    try:
        port = free_port()
        varnish = Varnish(
            os.path.join(services["TMP_DIR"], "varnish"), f"127.0.0.1:{port}", public_port=True, purge_port=True
        )
        varnish.start()
    except (RuntimeError, TimeoutError) as exc:
        pytest.fail(f"varnishd did not start (./test installs Debian's varnish and varnish-modules): {exc}")
    base = f"http://127.0.0.1:{port}"
    env = {"BASE_URL": base, "VARNISH_PURGE_URLS": varnish.purge_url, "FORWARDED_ALLOW_IPS": "127.0.0.1"}
    proc = spawn("serve", "--port", str(port), env=env, log=ARTIFACTS / "varnish-serve.log")
    try:
        wait_http(f"{base}/healthz")
        yield Stack(varnish, base)
    finally:
        stop(proc, signal.SIGINT)
        varnish.stop()


@pytest.fixture
async def web(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    await purge_everything(stack)  # the previous test's pages must not answer this one's
    async with httpx.AsyncClient(base_url=stack.cache, timeout=10) as client:
        yield client


async def purge_everything(stack: Stack) -> None:
    async with httpx.AsyncClient() as client:
        assert (await client.request("BAN", stack.cache + "/")).status_code == 200


def hit(response: httpx.Response) -> bool:
    """Varnish's `X-Varnish` names this request and, on a hit, the one that stored the object."""
    return len(response.headers["x-varnish"].split()) == 2


async def fetch(client: httpx.AsyncClient, path: str, **headers: str) -> httpx.Response:
    assert not client.cookies, "an anonymous visitor's client carries no cookie"
    response = await client.get(path, headers=headers)
    assert "xkey" not in response.headers, (path, "the tags reached the client")
    assert response.status_code in (200, 404, 410), (path, response.status_code)
    return response


@dataclass
class World:
    moderator: Account
    a_path: str  # quarantined by the CLI
    a_finding: str
    b_path: str  # its report restricted from the console
    b_finding: str
    b_scan: Scan
    c_path: str  # never touched
    c_finding: str


async def _instance(owner: str, author: Account, title: str, path: str) -> tuple[str, Scan, ScanFinding]:
    repo = await factories.create_repository(owner, f"{owner}-app")
    scan = await factories.create_scan(repo, author)
    canonical = await factories.create_canonical(repo, title, file_path=path, commit_sha=scan.commit_sha)
    occurrence = await factories.create_occurrence(scan, canonical)
    return f"/repos/github.com/{owner}/{owner}-app", scan, occurrence


async def build() -> World:
    author = await factories.create_account()
    moderator = await factories.create_account(email="mod-varnish@example.com", platform_role="moderator")
    a_path, _, a = await _instance("alfa", author, TITLE, "src/alfa_redirect.py")
    b_path, b_scan, b = await _instance("bravo", author, TITLE, "src/bravo_redirect.py")
    c_path, _, c = await _instance("charlie", author, OTHER_TITLE, "src/charlie_debug.py")
    await _instance("delta", author, OTHER_TITLE, "src/delta_debug.py")
    async with db.transaction() as session:
        await mark_dirty(session, [KEY, OTHER_KEY], "test", ring=False)
    await drain_all()  # this process has no VARNISH_PURGE_URLS yet: nothing cached, nothing purged
    return World(
        moderator, a_path, f"/findings/{a.public_id}", b_path, f"/findings/{b.public_id}", b_scan, c_path,
        f"/findings/{c.public_id}",
    )  # fmt: skip


def atlas_pages() -> list[str]:
    return [
        "/",
        "/index.json",
        "/infestations",
        "/infestations.json",
        f"/infestations/{KEY}",
        f"/infestations/{KEY}.json",
        f"/infestations/{OTHER_KEY}",
    ]


async def warm(client: httpx.AsyncClient, paths: list[str]) -> dict[str, str]:
    """Every page twice: the second answer comes from the cache, the same bytes."""
    bodies = {}
    for path in paths:
        first = await fetch(client, path)
        assert first.status_code == 200, path
        second = await fetch(client, path)
        assert hit(second), (path, "not served from the cache", second.headers)
        assert second.text == first.text and int(second.headers["age"]) >= 0
        bodies[path] = first.text
    return bodies


async def expect_fresh(client: httpx.AsyncClient, paths: list[str], gone: tuple[str, ...], when: str) -> None:
    for path in paths:
        response = await fetch(client, path)
        assert not hit(response), (when, path, "still served from the cache")
        for mark in gone:
            assert mark not in response.text, (when, path, mark)


async def expect_cached(client: httpx.AsyncClient, bodies: dict[str, str], when: str) -> None:
    for path, body in bodies.items():
        response = await fetch(client, path)
        assert hit(response) and response.text == body, (when, path, "an unaffected page left the cache")


async def test_takedowns_purge_every_affected_page_before_the_answer_and_keep_the_rest(
    stack: Stack, web: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = await build()
    a_pages = [world.a_path, world.a_path + ".json", world.a_finding]
    b_pages = [world.b_path, world.b_path + ".json", world.b_finding]
    kept = [world.c_path, world.c_path + ".json", world.c_finding]
    sitemap = "/sitemap/repos/1.xml"  # tagged `sitemap` alone: every takedown naming a repository purges it
    before = await warm(web, [*atlas_pages(), *a_pages, *b_pages, *kept, sitemap])
    assert "alfa-app" in before[f"/infestations/{KEY}"] and "src/bravo_redirect.py" in before[world.b_finding]
    assert "alfa-app" in before[sitemap]

    # the htmx fragment is its own object (the pages say Vary), and a session never touches the cache
    fragment = await fetch(web, "/infestations", **{"HX-Request": "true"})
    assert not hit(fragment) and "<html" not in fragment.text and "<html" in before["/infestations"]
    assert hit(await fetch(web, "/infestations", **{"HX-Request": "true"}))
    moderator_cookie = f"{COOKIE_NAME}={await open_session(world.moderator.id)}"
    for _ in range(2):
        assert not hit(await fetch(web, world.a_path, Cookie=moderator_cookie))
    assert hit(await fetch(web, world.a_path))

    # a quarantine from the CLI: purged before the command returns, every affected page fresh at the next request
    monkeypatch.setenv("VARNISH_PURGE_URLS", stack.varnish.purge_url)
    done = await tarakan(
        "moderate", "repo", "github.com/alfa/alfa-app", "--listing", "quarantined", "--reason", REASON,
        "--notes", NOTES, "--as", "mod-varnish@example.com",
    )  # fmt: skip
    assert done.code == 0, done
    assert "cache: Shared cache: the pages showing it were purged." in done.out
    await expect_fresh(web, [*atlas_pages(), *a_pages, sitemap], ("alfa-app", "alfa_redirect"), "after the quarantine")
    for path in a_pages[:2]:
        assert (await fetch(web, path)).status_code == 404, path
    # B's pages name the pattern A shared (they show its spread, which the quarantine changed): fresh too, B still
    # shown; C's pages share nothing with A and stay cached
    await expect_fresh(web, b_pages, (), "after the quarantine")
    assert "src/bravo_redirect.py" in (await fetch(web, world.b_finding)).text
    await expect_cached(web, {p: before[p] for p in kept}, "after the quarantine")

    # a restriction from the console (an htmx form posted through Varnish, which passes it): the answer says so
    await warm(web, atlas_pages())
    async with httpx.AsyncClient(base_url=stack.cache) as console:  # its read-your-writes cookie stays its own
        answer = await console.post(
            f"/moderation/scans/{world.b_scan.id}/visibility",
            data={"visibility": "restricted", "reason": REASON, "notes": NOTES, "return_to": "/moderation"},
            headers={"Cookie": moderator_cookie, "Origin": stack.cache, "HX-Request": "true"},
        )
    assert answer.status_code == 200, answer.text
    assert "Shared cache: the pages showing it were purged." in answer.text
    await expect_fresh(web, [*atlas_pages(), *b_pages], ("bravo_redirect",), "after the restriction")
    await expect_cached(web, {p: before[p] for p in kept}, "after the restriction")

    # the console without JavaScript: the redirect after the action carries the purge's outcome to the page
    await warm(web, [world.b_path])
    async with httpx.AsyncClient(base_url=stack.cache) as console:
        moved = await console.post(
            "/moderation/repos/github.com/bravo/bravo-app/listing",
            data={"listing_status": "quarantined", "reason": REASON, "notes": NOTES, "return_to": "/moderation"},
            headers={"Cookie": moderator_cookie, "Origin": stack.cache},
        )
        assert moved.status_code == 303 and "cache=purged" in moved.headers["location"], moved.headers
        answer = await console.get(moved.headers["location"], headers={"Cookie": moderator_cookie})
    assert "Shared cache: the pages showing it were purged." in answer.text
    await expect_fresh(web, [world.b_path], ("bravo-app",), "after the no-JS quarantine")

    # the worker's drain purges what its refreshes changed: the atlas moves at once, C's pages stay cached
    still_shown = ["/", "/index.json", "/infestations", "/infestations.json", f"/infestations/{OTHER_KEY}"]
    await warm(web, still_shown)
    assert await drain_all() >= 1
    await expect_fresh(web, still_shown, (TITLE,), "after the drain")
    await expect_cached(web, {p: before[p] for p in kept}, "after the drain")


async def test_the_edge_rules_purge_refusals_and_forwarded_addresses(stack: Stack, web: httpx.AsyncClient) -> None:
    # PURGE and BAN work on the listener named `purge` and from loopback on the unnamed one; on the listener named
    # `public` they are refused, loopback or not
    assert (await web.request("PURGE", "/", headers={"xkey-purge": "atlas"})).status_code == 200
    public = f"http://127.0.0.1:{stack.varnish.public_port}/"
    async with httpx.AsyncClient() as outside:
        for method in ("PURGE", "BAN"):
            done = await outside.request(method, stack.varnish.purge_url + "/", headers={"xkey-purge": "atlas"})
            assert done.status_code == 200, method
            refused = await outside.request(method, public, headers={"xkey-purge": "atlas"})
            assert refused.status_code == 403, method
        # the public listener serves pages like the other one
        assert (await outside.get(public.rstrip("/") + "/healthz")).status_code == 200
    # Varnish forwards X-Forwarded-For and the app trusts it: a public client named there is refused /metrics,
    # which the same request straight from loopback may read
    assert (await web.get("/metrics", headers={"X-Forwarded-For": "203.0.113.9"})).status_code == 404
    assert (await web.get("/metrics")).status_code == 200
    # an htmx header's other values are the page's own answer: no copy of their own (no cache busting)
    plain = await fetch(web, "/infestations")
    odd = await fetch(web, "/infestations", **{"HX-Request": "yes", "HX-History-Restore-Request": "0"})
    assert hit(odd) and odd.text == plain.text
    # an untagged answer (healthz) is never stored
    assert not hit(await web.get("/healthz")) and not hit(await web.get("/healthz"))


async def test_a_report_that_dirties_no_pattern_purges_its_repository_and_the_home_page(
    web: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch, stack: Stack
) -> None:
    # no drain follows a report without findings: the report path purges its repository's pages and, the
    # repository being listed, the home page that lists recent reports; another repository's page stays cached
    author = await factories.create_account()
    (echo, _, _), (foxtrot, _, _) = [await _instance(o, author, OTHER_TITLE, f"src/{o}.py") for o in ("echo", "fox")]
    pages = [echo, echo + ".json", "/", "/index.json"]
    before = await warm(web, [*pages, foxtrot])
    monkeypatch.setenv("VARNISH_PURGE_URLS", stack.varnish.purge_url)
    await submit_report(author, "github.com", "echo", "echo-app", report_body(findings=[], commit_sha="e" * 40))
    await expect_fresh(web, pages, (), "after a report without findings")
    assert "e" * 40 in (await fetch(web, echo + ".json")).text
    await expect_cached(web, {foxtrot: before[foxtrot]}, "after a report on another repository")


def _failures(stage: str) -> float:
    return REGISTRY.get_sample_value("tarakan_cache_purge_failures_total", {"stage": stage}) or 0.0


async def test_a_failed_purge_falls_back_to_everything_is_counted_and_said(
    stack: Stack, web: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = await build()
    await warm(web, [world.c_path, "/infestations.json"])
    monkeypatch.setenv("VARNISH_PURGE_URLS", stack.varnish.purge_url)
    tags_before, everything_before = _failures("tags"), _failures("everything")

    # a tag over Varnish's request header limit (8 KiB) fails every try; the fallback purges everything
    outcome = await purge.purge({"o:" + "9" * 9000})
    assert outcome.state == "fell_back" and _failures("tags") == tags_before + 1
    assert "everything there was purged instead" in outcome.notice()
    await expect_fresh(web, [world.c_path, "/infestations.json"], (), "after the fallback")

    # a cache that does not answer at all: the fallback fails too, counted, and the moderator is told
    dead = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("VARNISH_PURGE_URLS", f"{stack.varnish.purge_url},{dead}")
    outcome = await purge.purge({"atlas"})
    assert outcome.state == "failed" and outcome.failed == (dead.removeprefix("http://"),)
    assert _failures("tags") == tags_before + 2 and _failures("everything") == everything_before + 1
    done = await tarakan(
        "moderate", "scan", str(world.b_scan.id), "--visibility", "restricted", "--reason", REASON,
        "--notes", NOTES, "--as", "mod-varnish@example.com",
    )  # fmt: skip
    assert done.code == 0, done
    assert "the purge failed on 1 of 2 cache(s)" in done.out and "TarakanCachePurgeFailed" in done.out


async def test_a_page_fetched_across_a_purge_is_not_stored(tmp_path: Path) -> None:
    """The race the VCL closes: a fetch that began before a purge may have read the database before the takedown
    committed, so its answer goes to its one client and is not stored. The origin here is a stand-in that answers
    every GET slowly with a tagged page, numbered."""
    served = 0

    async def origin(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        while (await reader.readline()).strip():
            pass
        served += 1
        await asyncio.sleep(0.6)
        body = f"page {served}".encode()
        head = (
            "HTTP/1.1 200 OK\r\nCache-Control: public, max-age=30, s-maxage=300\r\nxkey: atlas\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        writer.write(head.encode() + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(origin, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    varnish = await asyncio.to_thread(Varnish(tmp_path / "varnish", f"127.0.0.1:{port}").start)
    try:
        async with httpx.AsyncClient(base_url=varnish.url, timeout=10) as client:
            in_flight = asyncio.create_task(client.get("/page"))
            await asyncio.sleep(0.3)  # its fetch is under way when the purge arrives
            assert (await client.request("PURGE", "/", headers={"xkey-purge": "atlas"})).status_code == 200
            assert (await in_flight).text == "page 1"
            again = await client.get("/page")
            assert not hit(again) and again.text == "page 2", "an answer fetched across a purge was stored"
            last = await client.get("/page")
            assert hit(last) and last.text == "page 2" and "xkey" not in last.headers
    finally:
        varnish.stop()
        server.close()


_NETNS_CLIENT = """
import http.client, json, sys
answers = {}
for method in ("GET", "PURGE", "BAN"):
    conn = http.client.HTTPConnection(sys.argv[1], int(sys.argv[2]), timeout=10)
    conn.request(method, "/", headers={"xkey-purge": "atlas"})
    answers[method] = conn.getresponse().status
    conn.close()
print(json.dumps(answers))
"""


@contextmanager
def private_network() -> Iterator[tuple[str, str]]:
    """A network namespace joined to this one by a veth pair on 10.203.N.0/30, as a load balancer on a private
    network sees the cache: yields (the namespace, the address of this side). Needs root and iproute2 (`ip netns`),
    as ./test runs; without them the test fails."""
    tag = os.getpid() % 100_000
    ns, here, there = f"tkn-vt-{tag}", f"tkv{tag}h", f"tkv{tag}n"
    subnet = f"10.203.{os.getpid() % 250}"

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True)

    ip("netns", "add", ns)
    try:
        ip("link", "add", here, "type", "veth", "peer", "name", there)
        ip("link", "set", there, "netns", ns)
        ip("addr", "add", f"{subnet}.1/30", "dev", here)
        ip("link", "set", here, "up")
        ip("netns", "exec", ns, "ip", "addr", "add", f"{subnet}.2/30", "dev", there)
        ip("netns", "exec", ns, "ip", "link", "set", there, "up")
        yield ns, f"{subnet}.1"
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)  # takes the veth pair with it


async def test_an_unnamed_listener_refuses_purges_from_a_private_network(tmp_path: Path) -> None:
    """varnishd started with one unnamed listener, behind a balancer on a private network: every visitor arrives
    from a private address, so the address cannot be the guard. A client in its own network namespace (10.203.N.2)
    gets pages but no PURGE or BAN (from loopback the unnamed listener takes them: the other tests purge so)."""

    async def origin(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (await reader.readline()).strip():
            pass
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(origin, "127.0.0.1", 0)
    backend = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        with private_network() as (ns, address):
            varnish = await asyncio.to_thread(Varnish(tmp_path / "varnish", backend, host=address).start)
            try:
                client = await asyncio.create_subprocess_exec(
                    "ip", "netns", "exec", ns, sys.executable, "-c", _NETNS_CLIENT, address, str(varnish.port),
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                )  # fmt: skip
                out, err = await client.communicate()
                assert client.returncode == 0, err.decode()
                assert json.loads(out) == {"GET": 200, "PURGE": 403, "BAN": 403}
            finally:
                varnish.stop()
    finally:
        server.close()
