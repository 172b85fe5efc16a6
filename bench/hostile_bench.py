"""Hostile-input benchmark (docs/security.md): the worst server time (`Server-Timing: app;dur`, the server runs with
SERVER_TIMING=1) of each adversarial input class against a real `tarakan serve` on throwaway Postgres and Valkey,
the longest /healthz wait while each class was in flight (a second client polls it every 50 ms), plus whether
/healthz answered while the largest report was processed. Target: every class <= 1 s. The classes of issue 22
(self-referential and deep SARIF bases, huge shared rule texts, many results, deep and many-keys JSON at the body
limit, every form shape on every form route) are built by the hostile corpus's generators (tests/system/support.py).

    .venv/bin/python -m bench.hostile_bench [--runs 3] [--no-write]

Writes bench/out/hostile.json and its section of docs/benchmarks.md."""

from __future__ import annotations

import asyncio
import json
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.common import bench_parser, publish, server_ms
from bench.services import throwaway_services
from tests.harness import stop
from tests.system import support
from tests.system.support import SARIF_TYPE, HostileBody, ShapeInput

SIZE = 1_900_000  # characters of hostile text inside one report (the document cap is 2,000,000)
COMMIT = "a" * 40
HEADING = "## Hostile input (bench/hostile_bench.py)"


def _report(meta: Any, findings: list[dict[str, Any]] | None = None) -> bytes:
    body = {
        "commit_sha": COMMIT,
        "model": "bench",
        "prompt_version": "v1",
        "document": {"tarakan_scan_format": 1, "findings": findings or [], "meta": meta},
    }
    return json.dumps(body).encode()


def _benign_findings() -> list[dict[str, Any]]:
    return [
        {"file": f"src/f{i}.py", "line_start": 1, "severity": "low", "title": f"Finding {i}", "description": "d" * 9000}
        for i in range(200)
    ]


REPORT_CLASSES: dict[str, Callable[[], bytes]] = {
    "token run (-eyJ x 475k)": lambda: _report("-eyJ" * (SIZE // 4)),
    "token-shaped dots": lambda: _report("eyJaaaaaaaaa!" * (SIZE // 13)),
    "private-key header run": lambda: _report("-----BEGIN " + "A " * (SIZE // 2)),
    "credential whitespace": lambda: _report("api_key" + " " * SIZE),
    "slack run": lambda: _report("xoxb" + "-" * SIZE),
    "many small strings": lambda: _report(["ab"] * (SIZE // 7)),
    "many small keys": lambda: _report({f"k{i}": 1 for i in range(SIZE // 12)}),
    # a valid report at the size limit: 200 findings, each a new canonical on the first run and a known one on the
    # second (assimilation in a fixed number of statements either way)
    "benign 200 x 9 kB findings": lambda: _report("", _benign_findings()),
    "NUL and surrogates": lambda: _report("a" * SIZE + "\x00\ud800"),
    "deep JSON (2 MB of [)": lambda: b"[" * 2_000_000,
    "body over the limit (5 MB)": lambda: b" " * 5_000_000,
}


@dataclass
class Target:
    """Where the classes are sent: the report API (moderator token), the form routes (a fresh moderator session per
    request: logout ends its own) and the values their path parameters take."""

    token: str
    report_url: str
    path_values: dict[str, str]
    sessions: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Request:
    path: str
    body: HostileBody
    form: bool = False


def _limit() -> int:
    from app.kernel.config import settings

    return settings().request_body_limit


def _report_json_shape(name: str) -> Callable[[Target], list[Request]]:
    """One of the corpus's JSON shapes on the report API, grown from the documented example report."""

    def build(target: Target) -> list[Request]:
        from app.kernel.limits import MAX_JSON_DEPTH
        from app.site.openapi import DOCUMENT

        shape = next(s for s in support.JSON_SHAPES if s.name == name)
        skeleton = DOCUMENT["components"]["schemas"]["ReportSubmission"]["examples"][0]
        body = shape.build(ShapeInput(skeleton, _limit(), MAX_JSON_DEPTH), "application/json")
        return [Request(target.report_url, body)]

    return build


def _sarif(make: Callable[[int], dict[str, Any]]) -> Callable[[Target], list[Request]]:
    def build(target: Target) -> list[Request]:
        return [Request(target.report_url, HostileBody(SARIF_TYPE, support.compact_json(make(_limit()))))]

    return build


def _forms(target: Target) -> list[Request]:
    """Every form shape (both encodings) on every form route of the router, at the site's body limit."""
    from app.kernel.limits import MAX_JSON_DEPTH, body_limit

    requests: list[Request] = []
    for _method, template in support.form_routes():
        path = support.fill_path(template, target.path_values, default="1")  # a form newer than this bench: id 1
        given = ShapeInput({}, body_limit(path), MAX_JSON_DEPTH)
        for content_type in support.FORM_TYPES:
            requests.extend(
                Request(path, shape.build(given, content_type), form=True) for shape in support.shapes_for(content_type)
            )
    return requests


# issue 22's classes: each a list of requests; the class's figure is the worst over them
SHAPE_CLASSES: dict[str, Callable[[Target], list[Request]]] = {
    "SARIF self-referential base (133 kB)": _sarif(lambda limit: support.self_referential_base(133_000)),
    "SARIF self-referential base (4 MiB)": _sarif(support.self_referential_base),
    "SARIF deep base chain": _sarif(support.deep_base_chain),
    "SARIF huge shared rule text": _sarif(support.huge_rule_text),
    "SARIF many results": _sarif(support.many_results),
    "SARIF many skipped results": _sarif(support.many_skipped_results),
    "SARIF many runs": _sarif(support.many_runs),
    "SARIF message templates": _sarif(support.message_templates),
    "deep JSON at the depth limit (4 MiB)": _report_json_shape("deep JSON at the depth limit, filling the body"),
    "many keys (4 MiB)": _report_json_shape("many keys filling the body"),
    "form routes (every form shape)": _forms,
}


async def _setup(sessions: int) -> Target:
    from app.accounts.service import create_account, create_token
    from app.accounts.sessions import open_session
    from app.kernel import db
    from app.registry.service import register_repository

    try:
        account = await create_account("bench@example.com", "bench", platform_role="moderator", state="active")
        token = await create_token(account.id, ["findings:submit"])
        await register_repository("github.com", "bench", "hostile", submitted_by_id=account.id)
        values = (await support.form_subjects()).path_values()
        opened = [await open_session(account.id) for _ in range(sessions)]
    finally:
        await db.dispose_engines()
    return Target(token, "/api/v1/repos/github.com/bench/hostile/reports", values, opened)


def _liveness(base: str, token: str, url: str, body: bytes) -> dict[str, Any]:
    """/healthz while the given report is in flight on the same process."""
    done: dict[str, Any] = {}

    def post() -> None:
        started = time.perf_counter()
        r = httpx.post(base + url, content=body, headers={"Authorization": f"Bearer {token}"}, timeout=600)
        done.update(status=r.status_code, report_s=time.perf_counter() - started, server_ms=server_ms(r))

    thread = threading.Thread(target=post)
    thread.start()
    time.sleep(0.05)
    started = time.perf_counter()
    health = httpx.get(base + "/healthz", timeout=30)
    health_s = time.perf_counter() - started
    in_flight = thread.is_alive()
    thread.join()
    return {**done, "healthz_status": health.status_code, "healthz_s": health_s, "report_in_flight": in_flight}


def _worst(worst: float, response: httpx.Response) -> float:
    ms = server_ms(response)
    if math.isnan(ms):
        raise SystemExit(
            f"no Server-Timing in the answer ({response.status_code}): does the server run with SERVER_TIMING=1?"
        )
    return max(worst, ms)


def run(runs: int) -> dict[str, Any]:
    with throwaway_services("tarakan-hostile-bench-") as services:
        env = services.use()
        form_requests = len(support.form_routes()) * sum(len(support.shapes_for(t)) for t in support.FORM_TYPES)
        target = asyncio.run(_setup(form_requests * runs))
        token, url = target.token, target.report_url
        proc, base = services.serve({**env, "SERVER_TIMING": "1"})
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        results: dict[str, Any] = {"runs": runs, "classes": {}, "load": f"{os.getloadavg()[0]:.1f}"}
        with httpx.Client(base_url=base, timeout=600) as client:
            for name, make in REPORT_CLASSES.items():
                body = make()
                worst, statuses = 0.0, set()
                for n in range(runs):
                    # a distinct run per attempt so a stored report is never a retry answered from the database
                    payload = body.replace(
                        b'"model": "bench"', f'"model": "bench", "run_id": "r{n}-{len(name)}-{name[:8]}"'.encode(), 1
                    )
                    response = client.post(url, content=payload, headers=headers)
                    statuses.add(response.status_code)
                    worst = _worst(worst, response)
                results["classes"][name] = {"bytes": len(body), "worst_server_ms": worst, "statuses": sorted(statuses)}
                print(f"  {name}: {len(body)} B, worst {worst:.0f} ms, {sorted(statuses)}", flush=True)
        for name, build in SHAPE_CLASSES.items():
            requests = build(target)
            worst, healthz, statuses = 0.0, 0.0, set()
            for _ in range(runs):
                for request in requests:
                    if request.form:
                        auth = {"Origin": base, "Cookie": f"{_cookie_name()}={target.sessions.pop()}"}
                    else:
                        auth = {"Authorization": f"Bearer {token}"}
                    probe = support.send_while_polling(base, request.path, request.body, auth, timeout=600)
                    if probe.response is None:
                        raise SystemExit(f"{name}: no answer from {request.path}: {probe.error}")
                    statuses.add(probe.response.status_code)
                    worst = _worst(worst, probe.response)
                    healthz = max(healthz, probe.healthz_worst)
            size = max(len(request.body.data) for request in requests)
            results["classes"][name] = {
                "bytes": size,
                "worst_server_ms": worst,
                "worst_healthz_ms": healthz * 1000,
                "statuses": sorted(statuses),
            }
            print(
                f"  {name}: {size} B, worst {worst:.0f} ms, /healthz {healthz * 1000:.0f} ms, {sorted(statuses)}",
                flush=True,
            )
        results["liveness"] = _liveness(base, token, url, REPORT_CLASSES["token run (-eyJ x 475k)"]())
        print(f"  liveness: {results['liveness']}", flush=True)
        stop(proc)
    return results


def _cookie_name() -> str:
    from app.accounts.sessions import COOKIE_NAME

    return COOKIE_NAME


def markdown(results: dict[str, Any]) -> str:
    lines = [
        HEADING,
        "",
        f"Command: `.venv/bin/python -m bench.hostile_bench --runs {results['runs']}` (load average "
        f"{results.get('load', '?')}). Worst server time of each adversarial class against one `tarakan serve` (a "
        "moderator token: no quota stops a run); worst /healthz: a second client's longest wait meanwhile. Target: "
        "<= 1000 ms each.",
        "",
        "| class | worst server ms | worst /healthz ms | statuses |",
        "|---|---:|---:|---|",
    ]
    for name, row in results["classes"].items():
        statuses = ", ".join(str(s) for s in row["statuses"])
        healthz = f"{row['worst_healthz_ms']:.0f}" if "worst_healthz_ms" in row else "-"
        lines.append(f"| {name} | {row['worst_server_ms']:.0f} | {healthz} | {statuses} |")
    live = results["liveness"]
    lines += [
        "",
        f"/healthz during the token-run report: {live['healthz_status']} in {live['healthz_s'] * 1000:.0f} ms "
        f"(report still in flight: {live['report_in_flight']}; report answered {live.get('status')} in "
        f"{live.get('report_s', 0) * 1000:.0f} ms).",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    args = bench_parser(__doc__, runs=3, tiers=False).parse_args()
    publish("hostile", run(args.runs), lambda results, _command: markdown(results), HEADING, args)


if __name__ == "__main__":
    main()
