"""The pool under abuse (issue 22, docs/security.md "Body budget"): one member token sends 30 maximal valid reports
at once (200 findings each, the document just under its 2,000,000-character cap: each body near the 4 MiB limit) to
one real `tarakan serve` while an anonymous reader polls `/infestations`. The reader never gets a 503 (no pool or
thread starvation) and its p95 stays under 1 s; the token's burst is cut by the per-account report limit, and the
token ends with 429s."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from typing import Any

import httpx

from app.accounts.service import create_token
from app.reports.policy import PER_MINUTE_LIMIT, PER_REPOSITORY_MINUTE_LIMIT
from app.reports.validation import MAX_FINDINGS, MAX_RAW_DOCUMENT
from tests import factories
from tests.harness import running_server

BURST = 30
READER_P95 = 1.0  # seconds
# two UTF-8 bytes a character mostly: 2,000,000 characters of it make a body near the 4 MiB limit
PROSE = "Обработчик подставляет имя пользователя прямо в строку запроса, до проверки драйвером. "


def maximal_report(n: int) -> dict[str, Any]:
    """A valid report whose document is just under MAX_RAW_DOCUMENT characters (as the validator counts them:
    `ensure_ascii=False`): MAX_FINDINGS findings with long descriptions (distinct commit and run per `n`)."""
    findings = [
        {
            "file": f"src/module{i}.py",
            "line_start": i + 1,
            "severity": "high",
            "title": f"SQL injection in handler {i}",
            "description": "",
        }
        for i in range(MAX_FINDINGS)
    ]
    document: dict[str, Any] = {"tarakan_scan_format": 1, "findings": findings}
    room = (MAX_RAW_DOCUMENT - 2_000 - len(json.dumps(document, ensure_ascii=False))) // MAX_FINDINGS
    for finding in findings:
        finding["description"] = (PROSE * (room // len(PROSE) + 1))[:room]
    return {
        "commit_sha": f"{n + 1:040x}",
        "model": "gpt-test",
        "prompt_version": "review/v1",
        "run_id": f"abuse-{n}",
        "document": document,
    }


# the reader runs in its own process, so the sender's work in this one does not delay its measurements
READER = """
import json, sys, threading, time
import httpx
base, stop, samples = sys.argv[1], threading.Event(), []
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
with httpx.Client(timeout=30, verify=False) as client:
    print("ready", flush=True)
    while not stop.is_set():
        started = time.monotonic()
        try:
            status = client.get(base + "/infestations").status_code
        except httpx.HTTPError as exc:
            status = type(exc).__name__
        samples.append((status, time.monotonic() - started))
        stop.wait(0.05)
print(json.dumps(samples), flush=True)
"""


class Reader:
    """An anonymous client polling `/infestations` every 50 ms in another process: each answer's status and
    latency."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.samples: list[tuple[int | str, float]] = []

    def __enter__(self) -> Reader:
        self._proc = subprocess.Popen(
            [sys.executable, "-c", READER, self.base], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self._proc.stdout is not None
        assert self._proc.stdout.readline().strip() == "ready"
        return self

    def __exit__(self, *exc: object) -> None:
        out, _err = self._proc.communicate("", timeout=60)
        self.samples = [(status, seconds) for status, seconds in json.loads(out.strip().splitlines()[-1])]


async def test_a_burst_of_maximal_reports_from_one_token_leaves_readers_served() -> None:
    member = await factories.create_account(state="active")
    token = await create_token(member.id, ["findings:submit"])
    # a little public data for the reader: one pattern in two repositories
    submitter = await factories.create_account()
    for _ in range(2):
        listed = await factories.create_repository()
        await factories.create_instance(listed, submitter, "SQL injection in login handler")
    # enough repositories that the per-repository limit never binds before the per-account one
    per_repo = PER_REPOSITORY_MINUTE_LIMIT
    repos = [await factories.create_repository() for _ in range(-(-(BURST + 1) // per_repo))]
    urls = [f"/api/v1/repos/{r.host}/{r.owner}/{r.name}/reports" for r in repos]
    bodies = [json.dumps(maximal_report(n), ensure_ascii=False).encode() for n in range(BURST + 1)]
    assert all(3_500_000 < len(body) <= 4 * 1024 * 1024 for body in bodies), [len(b) for b in bodies[:1]]
    bearer = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    with running_server() as base:
        async with httpx.AsyncClient(base_url=base, timeout=120, limits=httpx.Limits(max_connections=BURST)) as http:
            assert (await http.get("/infestations")).status_code == 200  # warm: templates, caches
            with Reader(base) as reader:
                started = time.monotonic()
                answers = await asyncio.gather(
                    *(http.post(urls[n % len(urls)], content=bodies[n], headers=bearer) for n in range(BURST))
                )
                burst_seconds = time.monotonic() - started
                time.sleep(0.2)  # a few reads after the burst too
            last = await http.post(urls[-1], content=bodies[BURST], headers=bearer)

    statuses = [a.status_code for a in answers]
    latencies = sorted(seconds for _status, seconds in reader.samples)
    p95 = latencies[min(len(latencies) - 1, round(0.95 * (len(latencies) - 1)))]
    reads = sorted({str(status) for status, _seconds in reader.samples})
    print(
        f"burst of {BURST} x {len(bodies[0]):,} B in {burst_seconds:.1f} s: "
        f"{statuses.count(201)} x 201, {statuses.count(429)} x 429; reader: {len(latencies)} reads {reads}, "
        f"p50 {latencies[len(latencies) // 2] * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, max {latencies[-1] * 1000:.0f} ms"
    )
    assert set(statuses) <= {201, 429}, [
        (a.status_code, a.text[:200]) for a in answers if a.status_code not in (201, 429)
    ]
    assert statuses.count(201) <= PER_MINUTE_LIMIT and statuses.count(429) >= BURST - PER_MINUTE_LIMIT, statuses
    assert last.status_code == 429 and "retry-after" in last.headers, (last.status_code, last.text[:200])
    assert len(latencies) >= 10, reader.samples
    assert reads == ["200"], reader.samples  # no 503 (and nothing else but the page)
    assert p95 < READER_P95, f"reader p95 {p95:.2f} s over {len(latencies)} reads"
