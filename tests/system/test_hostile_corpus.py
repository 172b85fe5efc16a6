"""The hostile corpus (issue 22, docs/security.md): every body route the server documents in its OpenAPI document,
in every content type listed for it, and every HTML form route of the router, gets generated worst shapes at the
size limits (tests/system/support.py: deep JSON at and past the depth bound, many keys, long strings, unicode edge
cases, the body limit and one byte over; self-referential and deep SARIF bases, huge shared rule texts, far too
many results, message templates; forms with many or huge fields and multipart files). Each one is sent to one real
`tarakan serve` while a second client polls `/healthz` every 50 ms: the hostile request is answered (any status but
a 5xx, never a dropped connection) within 10 s, and `/healthz` never waits more than 0.5 s (a shape that breaks only
this bound is sent once more: a loaded machine's scheduling delay does not repeat on cue, a held event loop does).

Nothing here names a route: a route added to the document (or a POST form added to the router) is in the corpus
by construction, and a content type without shape generators fails the test until it gets some. The API is called
with a moderator's token carrying every scope (moderators are exempt from the report limits, so no 429 hides the
work), the forms with a fresh moderator session each (logout ends its own), same-origin."""

from __future__ import annotations

import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from app.accounts.models import TOKEN_SCOPES
from app.accounts.service import create_token
from app.accounts.sessions import COOKIE_NAME, open_session
from app.kernel.limits import MAX_JSON_DEPTH, body_limit
from app.maintainers.service import claim_repository
from tests import factories
from tests.harness import ARTIFACTS, start_server, stop
from tests.system.support import (
    FORM_TYPES,
    HostileBody,
    Probe,
    Shape,
    ShapeInput,
    default_skeleton,
    fill_path,
    form_routes,
    form_subjects,
    router_body_routes,
    send_while_polling,
    shapes_for,
)

ANSWER_WITHIN = 10.0  # seconds for the hostile request's answer
HEALTHZ_WITHIN = 0.5  # seconds /healthz may wait meanwhile
GIVE_UP = 15.0  # the client's own timeout: a little past the bound, to tell "slow" from "frozen"
BODY_METHODS = frozenset({"post", "put", "patch", "delete"})  # as the document writes methods
LOG = ARTIFACTS / "hostile-corpus-server.log"


@dataclass(frozen=True)
class Case:
    method: str
    template: str  # the path as documented (`{host}`) or routed (`{scan_id:int}`)
    content_type: str
    skeleton: dict[str, Any]
    form: bool

    @property
    def label(self) -> str:
        return f"{self.method.upper()} {self.template} [{self.content_type}]"


def _schema_example(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any] | None:
    if "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    examples = schema.get("examples") or []
    return dict(examples[0]) if examples and isinstance(examples[0], dict) else None


def documented_cases(document: dict[str, Any]) -> list[Case]:
    """Every (path, method, content type) of the document with a request body."""
    cases = []
    for template, operations in document["paths"].items():
        for method, operation in operations.items():
            if method not in BODY_METHODS or "requestBody" not in operation:
                continue
            for content_type, media in operation["requestBody"]["content"].items():
                # a line's schema for a body of lines (NDJSON), else the body's
                schema = media.get("x-itemSchema") or media.get("schema", {})
                skeleton = _schema_example(document, schema) or default_skeleton(content_type)
                cases.append(Case(method, template, content_type, skeleton, form=False))
    return cases


def form_cases() -> list[Case]:
    """Every body route of the router outside /api/ (the HTML forms), in both form encodings."""
    return [
        Case(method.lower(), template, content_type, {}, form=True)
        for method, template in form_routes()
        for content_type in FORM_TYPES
    ]


def api_body_routes() -> set[tuple[str, str]]:
    """The router's API routes that take a body, as the document writes their paths (no convertors)."""
    return {
        (re.sub(r"\{(\w+):\w+\}", r"{\1}", template), method.lower())
        for method, template in router_body_routes()
        if template.startswith("/api/")
    }


class Server:
    """One `tarakan serve` for the whole corpus; restarted only when a shape left it frozen past the bounds (so the
    next shape is measured on its own)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.base = ""
        self.restarts = 0

    def start(self) -> None:
        self.proc, self.base = start_server(log=LOG)

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)

    def settle(self) -> None:
        """Wait until /healthz answers promptly again; restart the server when it does not within 5 s."""
        with httpx.Client(timeout=HEALTHZ_WITHIN) as client:
            for _ in range(10):
                try:
                    if client.get(self.base + "/healthz").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
        assert self.proc is not None
        stop(self.proc, signal.SIGKILL)
        self.restarts += 1
        self.start()


def problems_of(probe: Probe) -> list[str]:
    found = []
    if probe.response is None:
        found.append(f"no answer ({probe.error})")
    elif probe.status is not None and probe.status >= 500:
        found.append(f"answered {probe.status}")
    if probe.seconds > ANSWER_WITHIN:
        found.append(f"answered after {probe.seconds:.1f} s (bound {ANSWER_WITHIN:.0f} s)")
    if probe.healthz_worst > HEALTHZ_WITHIN:
        found.append(f"/healthz waited {probe.healthz_worst:.2f} s (bound {HEALTHZ_WITHIN} s)")
    found.extend(probe.healthz_problems[:2])
    return found


def only_waited(probe: Probe) -> bool:
    """The one problem is /healthz's wait: answered, no 5xx, in time, no poll failed."""
    return (
        probe.response is not None
        and (probe.status or 0) < 500
        and probe.seconds <= ANSWER_WITHIN
        and not probe.healthz_problems
    )


async def test_every_body_route_survives_every_hostile_shape_with_healthz_live() -> None:
    moderator = await factories.create_account(platform_role="moderator")
    token = await create_token(moderator.id, list(TOKEN_SCOPES))
    subjects = await form_subjects()
    target, repo = subjects.member, subjects.repository
    values = {
        **subjects.path_values(),
        "canonical_public_id": str(subjects.canonical.public_id),
        # another account's claim: a body that gets through the intake meets a 404, never the forge
        "claim_id": str((await claim_repository(target.id, repo.host, repo.owner, repo.name))[0].id),
        "ref": str(
            subjects.occurrence.public_id
        ),  # a finding page's statement form (the moderator maintains nothing: 403)
        "statement_id": "1",  # no such statement: a form that gets through the intake meets a 404
        "webhook_id": "1",  # no such webhook: a body that gets through the intake meets a 404
    }
    LOG.parent.mkdir(exist_ok=True)
    LOG.unlink(missing_ok=True)
    server = Server()
    server.start()
    try:
        document = httpx.get(server.base + "/api/v1/openapi.json", timeout=10).json()
        api_cases = documented_cases(document)
        # an API route taking a body that the document does not describe would escape the corpus
        documented = {(case.template, case.method) for case in api_cases}
        assert api_body_routes() <= documented, api_body_routes() - documented
        cases = api_cases + form_cases()
        assert any("sarif" in case.content_type for case in cases) and any(case.form for case in cases), cases
        plan: list[tuple[Case, Shape]] = [(case, shape) for case in cases for shape in shapes_for(case.content_type)]
        sessions = [await open_session(moderator.id) for case, _shape in plan if case.form]
        results: list[tuple[Case, Shape, Probe]] = []
        for case, shape in plan:
            path = fill_path(case.template, values)
            skeleton = case.skeleton
            if "repository" in skeleton:  # a batch line names its repository: the seeded one, so lines get written
                skeleton = skeleton | {"repository": f"{repo.host}/{repo.owner}/{repo.name}"}
            given = ShapeInput(skeleton, body_limit(path), MAX_JSON_DEPTH)
            body: HostileBody = shape.build(given, case.content_type)
            if case.form:
                headers = {"Origin": server.base, "Cookie": f"{COOKIE_NAME}={sessions.pop()}"}
            else:
                headers = {"Authorization": f"Bearer {token}"}
            probe = send_while_polling(server.base, path, body, headers, method=case.method.upper(), timeout=GIVE_UP)
            if problems_of(probe) and only_waited(probe):
                # /healthz late and nothing else: sent once more, since a busy machine's scheduling delay does not
                # repeat on cue while a shape that holds the event loop does so every time
                server.settle()
                if case.form:
                    headers = headers | {"Cookie": f"{COOKIE_NAME}={await open_session(moderator.id)}"}
                probe = send_while_polling(
                    server.base, path, body, headers, method=case.method.upper(), timeout=GIVE_UP
                )
            results.append((case, shape, probe))
            if problems_of(probe):
                server.settle()
    finally:
        server.stop()

    lines, failures = [], []
    for case, shape, probe in results:
        line = (
            f"{case.label} {shape.name}: {probe.status or 'no answer'} in {probe.seconds:.2f} s, "
            f"/healthz worst {probe.healthz_worst * 1000:.0f} ms over {probe.healthz_polls} polls"
        )
        lines.append(line)
        problems = problems_of(probe)
        if problems:
            failures.append(f"{line}: " + "; ".join(problems))
    print("\n".join(lines))
    print(f"{len(results)} hostile requests over {len(cases)} (route, content type) pairs; restarts: {server.restarts}")
    assert not failures, (
        f"{len(failures)} of {len(results)} hostile requests broke a bound (server log: {Path(LOG)}):\n"
        + "\n".join(failures)
    )
