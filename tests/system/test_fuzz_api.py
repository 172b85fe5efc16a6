"""The API fuzz suite (docs/security.md): schemathesis generates requests for every operation of the OpenAPI
document a live `tarakan serve` publishes at `/api/v1/openapi.json` (operations added to the document are fuzzed
without touching this file) and sends them to that server on the real database. It asserts what a client relies on:

- no 5xx, except a 503 from load shedding, which must carry `Retry-After`;
- every answer conforms to the document: a documented status code, content type and body schema;
- a 4xx changed nothing: the authoritative tables (their row counts and a hash of their contents) are the same
  after it as before it.

Each operation is fuzzed with valid data (schema-conforming; secured operations with a token holding every scope
of an active reviewer-tier account) and with invalid data (negative mode), with generated path values and with the
values of real rows seeded first (a repository with a report, its findings and their pattern; each operation's
documented example is sent there first), and secured operations once more without a token. The budget is
`TARAKAN_FUZZ_EXAMPLES` examples per operation and variant (default 10: ~400 requests, ~30 s on an idle machine);
the seed is `TARAKAN_FUZZ_SEED`. Every failure prints its curl command and the line that replays the run. A larger
run by hand:

    TARAKAN_FUZZ_EXAMPLES=200 .venv/bin/python -m pytest -q -s tests/system/test_fuzz_api.py
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hypothesis
import psycopg
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase
from schemathesis import Case, GenerationMode
from schemathesis.config import SchemathesisConfig
from schemathesis.core.failures import FailureGroup
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from app.accounts.models import TOKEN_SCOPES
from app.accounts.service import create_token
from app.models import metadata
from app.site.openapi import EXAMPLE_COMMIT
from e2e.seed import seed_pattern
from tests import factories
from tests.harness import start_server, stop, tarakan
from tests.reports.support import report_body

# a batch's NDJSON goes as the bytes it is (the document describes it as binary, one BatchReport a line)
schemathesis.serializer.alias("application/x-ndjson", "application/octet-stream")

EXAMPLES = int(os.environ.get("TARAKAN_FUZZ_EXAMPLES", "10"))
SEED = int(os.environ.get("TARAKAN_FUZZ_SEED", "20261130"))
REPLAY = f"TARAKAN_FUZZ_SEED={SEED} TARAKAN_FUZZ_EXAMPLES={EXAMPLES} .venv/bin/python -m pytest -q -s {__file__}"
CHECKS = [status_code_conformance, content_type_conformance, response_schema_conformance, negative_data_rejection]
# schemathesis's default rejections, and 413: an invalid body over its route's byte limit is refused unread (the
# routes that take no fields accept 1 KiB; docs/security.md "Body budget")
REJECTIONS = ("400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429", "5xx")
_CONFIG = SchemathesisConfig.from_dict({"checks": {"negative_data_rejection": {"expected-statuses": [*REJECTIONS]}}})

# Not authoritative, so a 4xx may change them: throttled bookkeeping (when a token, session or account was last
# seen), the login attempt log that rate limiting reads, process coordination (leases, job runs), and everything
# derived from the authoritative rows by the projection (the infestation tables, the dirty-key queue, rollups).
NOT_AUTHORITATIVE_COLUMNS = {
    ("api_tokens", "last_used_at"),
    ("accounts", "last_seen_at"),
    ("web_sessions", "last_seen_at"),
}
NOT_AUTHORITATIVE_TABLES = {"login_attempts", "instance_leases", "job_runs"}
DERIVED_PREFIX = "infestation_"  # the atlas projection, its rollups and its dirty-key queue


def authoritative_tables() -> dict[str, list[str]]:
    """Table -> compared columns, from the models' metadata (a table added later is compared by default)."""
    return {
        table.name: [c.name for c in table.columns if (table.name, c.name) not in NOT_AUTHORITATIVE_COLUMNS]
        for table in metadata.sorted_tables
        if table.name not in NOT_AUTHORITATIVE_TABLES
        and not table.name.startswith(DERIVED_PREFIX)
        and "rollup" not in table.name
    }


def snapshot_query(tables: dict[str, list[str]]) -> str:
    """One round trip: each table's row count and an md5 of its rows in a stable order."""
    parts = [
        f"SELECT '{name}', count(*), md5(coalesce(string_agg(r::text, '|' ORDER BY r::text), '')) "
        f"FROM (SELECT {', '.join(columns)} FROM {name}) r"
        for name, columns in tables.items()
    ]
    return " UNION ALL ".join(parts)


@dataclass
class Run:
    base: str
    snapshot: Callable[[], list[tuple[str, int, str]]]
    session: requests.Session = field(default_factory=requests.Session)
    statuses: Counter[int] = field(default_factory=Counter)
    per_operation: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[tuple[str, int]] = field(default_factory=Counter)
    snapshot_seconds: float = 0.0
    request_seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    operations: list[str] = field(default_factory=list)
    unchanged: list[tuple[str, int, str]] | None = None  # the snapshot after the last request, when it was a 4xx

    def send(self, case: Case[Any], headers: dict[str, str], *, negative: bool = False) -> None:
        started = time.perf_counter()
        # the tables as the previous 4xx left them (nothing was sent since), else as they are now
        before, self.unchanged = self.unchanged or self.snapshot(), None
        self.snapshot_seconds += time.perf_counter() - started
        started = time.perf_counter()
        response = case.call(base_url=self.base, session=self.session, headers=headers, timeout=30)
        self.request_seconds += time.perf_counter() - started
        self.statuses[response.status_code] += 1
        self.per_operation[case.operation.label] += 1
        self.outcomes[(case.operation.label, response.status_code)] += 1
        found: list[str] = []
        if response.status_code == 503:
            if "retry-after" not in {k.lower() for k in response.headers}:
                found.append("503 without Retry-After")
        elif response.status_code >= 500:
            found.append(f"server error {response.status_code}")
        try:
            case.validate_response(response, checks=CHECKS if negative else CHECKS[:3], headers=headers)
        except FailureGroup as failures:
            found.extend(f"{failure.title}: {failure.message}" for failure in failures.exceptions)
        if 400 <= response.status_code < 500:
            after = self.snapshot()
            changed = sorted({row[0] for row in set(before) ^ set(after)})
            if changed:
                found.append(f"a {response.status_code} changed {', '.join(changed)}")
            self.unchanged = after
        if found:
            curl = case.as_curl_command(headers=headers, base_url=self.base)
            self.problems.append(f"{case.operation.label} -> {response.status_code}: {'; '.join(found)}\n  {curl}")


def example_body(document: dict[str, Any], operation: Any) -> dict[str, Any]:
    """The JSON request body's first documented example, as `Case` arguments (none without a body)."""
    content = operation.definition.raw.get("requestBody", {}).get("content", {})
    if "application/json" not in content:
        return {}
    schema = content["application/json"]["schema"]
    if "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return {"body": schema["examples"][0], "media_type": "application/json"}


def explore(
    run: Run, operation: Any, mode: GenerationMode, headers: dict[str, str], examples: int, **fixed: Any
) -> None:
    strategy = operation.as_strategy(generation_mode=mode, **fixed)

    # no shrinking: each problem is recorded with its curl command and the run carries on
    @hypothesis.settings(
        max_examples=examples,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    @hypothesis.seed(SEED)
    @hypothesis.given(strategy)
    def fuzz(case: Case[Any]) -> None:
        run.send(case, headers, negative=mode is GenerationMode.NEGATIVE)

    try:
        fuzz()
    except hypothesis.errors.Unsatisfiable:
        assert mode is GenerationMode.NEGATIVE, f"no valid request for {operation.label}"  # nothing to make invalid


def seed_over_http(base: str, pattern_key: str, author_bearer: dict[str, str]) -> dict[str, str]:
    """Real rows, written through the API by another account than the fuzzer's (so the fuzzer may check and
    confirm them); returns the path values that name them."""
    repo = {"host": "github.com", "owner": "fuzz", "name": "target"}
    assert requests.post(f"{base}/api/v1/repositories", json=repo, headers=author_bearer, timeout=10).ok
    report = requests.post(
        f"{base}/api/v1/repos/github.com/fuzz/target/reports",
        json=report_body(commit_sha=EXAMPLE_COMMIT),
        headers=author_bearer,
        timeout=10,
    )
    assert report.status_code == 201, report.text
    finding = report.json()["findings"][0]
    return {
        **repo,
        "scan_id": str(report.json()["id"]),
        "canonical_public_id": finding["canonical_public_id"],
        "ref": finding["public_id"],
        "pattern_key": pattern_key,
    }


def fuzz_every_operation(base: str, real: dict[str, str], bearer: dict[str, str]) -> Run:
    with psycopg.connect(os.environ["DATABASE_URL"].replace("+psycopg", ""), autocommit=True) as conn:
        query = snapshot_query(authoritative_tables())
        run = Run(base, lambda: [(str(n), int(c), str(h)) for n, c, h in conn.execute(query).fetchall()])
        # the document as the server publishes it (from_url would leave out the document's own operation)
        document = requests.get(f"{base}/api/v1/openapi.json", timeout=10).json()
        schema = schemathesis.openapi.from_dict(document, config=_CONFIG)
        described = {f"{m.upper()} {path}" for path, item in document["paths"].items() for m in item}
        for result in schema.get_all_operations():
            assert isinstance(result, Ok), result.err()  # the document resolves
            operation = result.ok()
            run.operations.append(operation.label)
            secured = bool(operation.definition.raw.get("security"))
            headers = bearer if secured else {}
            path_names = {p.name for p in operation.path_parameters}
            if path_names <= real.keys():  # the documented example (if any) on real rows: a 2xx to conform
                values = {name: real[name] for name in path_names}
                run.send(operation.Case(path_parameters=values, **example_body(document, operation)), headers)
            explore(run, operation, GenerationMode.POSITIVE, headers, EXAMPLES)
            explore(run, operation, GenerationMode.NEGATIVE, headers, EXAMPLES)
            if path_names and path_names <= real.keys():
                values = {name: real[name] for name in path_names}
                explore(run, operation, GenerationMode.POSITIVE, headers, EXAMPLES, path_parameters=values)
                explore(run, operation, GenerationMode.NEGATIVE, headers, EXAMPLES, path_parameters=values)
            if secured:
                explore(run, operation, GenerationMode.POSITIVE, {}, max(2, EXAMPLES // 4))
    assert set(run.operations) == described, described ^ set(run.operations)
    return run


async def test_fuzzing_every_operation_finds_no_5xx_no_undocumented_answer_and_no_write_on_a_4xx(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fuzzer = await factories.create_account(state="active", trust_tier="reviewer")
    bearer = {"Authorization": "Bearer " + await create_token(fuzzer.id, list(TOKEN_SCOPES))}
    author = await factories.create_account(state="active", trust_tier="reviewer")
    author_bearer = {"Authorization": "Bearer " + await create_token(author.id, list(TOKEN_SCOPES))}
    pattern = await seed_pattern("Fuzzed pattern", repos=2)

    monkeypatch.setenv("EXPORT_DIR", str(tmp_path))  # the server and the export command share it
    server, base = start_server(quiet=True)
    try:
        real = seed_over_http(base, pattern.key, author_bearer)
        exported = await tarakan("export")  # so the export documents answer 200 too
        assert exported.code == 0, exported.err
        run = fuzz_every_operation(base, real, bearer)
    finally:
        stop(server)

    total = sum(run.statuses.values())
    server_errors = sum(n for status, n in run.statuses.items() if status >= 500)
    print(f"\nfuzz: {total} requests, {server_errors} 5xx, {len(run.operations)} operations, seed {SEED}")
    print(f"fuzz: statuses {sorted(run.statuses.items())}")
    print(f"fuzz: after a 4xx, unchanged: {', '.join(authoritative_tables())} (not compared: the rest)")
    print(f"fuzz: {run.request_seconds:.1f} s waiting for answers, {run.snapshot_seconds:.1f} s in snapshots before")
    for label, n in sorted(run.per_operation.items()):
        statuses = ", ".join(f"{status}x{k}" for (op, status), k in sorted(run.outcomes.items()) if op == label)
        print(f"fuzz:   {label}: {n} ({statuses})")
    assert len(run.operations) >= 12 and set(run.operations) == set(run.per_operation)  # every one was sent
    assert not run.problems, f"{len(run.problems)} problems (replay: {REPLAY}):\n" + "\n".join(run.problems[:30])
