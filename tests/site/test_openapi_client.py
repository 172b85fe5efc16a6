"""The OpenAPI document drives a generator: `openapi-python-client` turns it into a client without one warning
(every operation, response and media type understood), its methods are named by the operationIds, and the
generated client talks to the app: its models parse the real answers (required fields, typed consts, the badge's
SVG as text)."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from app.accounts.service import create_token
from app.site.openapi import DOCUMENT
from tests import factories
from tests.reports import support
from tests.reports.support import report_body

PACKAGE = "tarakan_generated_client"
# the document names the true media types; a Python client reads the gzip files as bytes and the SVG as text, and
# sends and reads a batch's NDJSON as bytes
CONFIG = """\
content_type_overrides:
  application/gzip: application/octet-stream
  image/svg+xml: text/plain
  application/x-ndjson: application/octet-stream
post_hooks: []
"""


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    root = tmp_path_factory.mktemp("openapi_client")
    (root / "openapi.json").write_text(json.dumps(DOCUMENT))
    (root / "config.yaml").write_text(CONFIG)
    run = subprocess.run(
        [
            *(sys.executable, "-m", "openapi_python_client", "generate", "--path", "openapi.json"),
            *("--meta", "none", "--config", "config.yaml", "--output-path", PACKAGE),
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert "WARNING" not in output and "Unable" not in output and "Error" not in output, output
    sys.path.insert(0, str(root))
    try:
        return importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(root))


def _operation_ids() -> list[str]:
    return [
        operation["operationId"]
        for item in DOCUMENT["paths"].values()
        for operation in item.values()
        if isinstance(operation, dict) and "responses" in operation
    ]


def _api(package: ModuleType, operation_id: str) -> Any:
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", operation_id).lower()
    return importlib.import_module(f"{package.__name__}.api.default.{snake}")


def test_every_operation_is_a_method_named_by_its_operation_id(generated: ModuleType) -> None:
    ids = _operation_ids()
    assert len(ids) == len(set(ids)) >= 29
    methods = {p.stem for p in (Path(generated.__file__ or "").parent / "api" / "default").glob("*.py")}
    assert {re.sub(r"(?<!^)(?=[A-Z])", "_", i).lower() for i in ids} == methods - {"__init__"}
    assert "submit_report" in methods and "get_export_findings" in methods


async def test_the_generated_client_reads_the_real_answers(client: httpx.AsyncClient, generated: ModuleType) -> None:
    models = importlib.import_module(f"{PACKAGE}.models")
    submitter = await factories.create_account(state="active")
    reviewer = await support.reviewer()

    def api_client(token: str) -> Any:
        api = generated.AuthenticatedClient(base_url=str(client.base_url), token=token)
        headers = {"Authorization": "Bearer " + token}
        api.set_async_httpx_client(
            httpx.AsyncClient(transport=client._transport, base_url=client.base_url, headers=headers)
        )
        return api

    submitting = api_client(await create_token(submitter.id, ["findings:submit"]))
    repository = await _api(generated, "registerRepository").asyncio_detailed(
        client=submitting, body=models.RepositoryRegistration(host="github.com", owner="acme", name="generated")
    )
    assert repository.status_code == 201 and isinstance(repository.parsed, models.Repository)

    body = models.ReportSubmission.from_dict(report_body())
    assert body.to_dict()["document"]["tarakan_scan_format"] == 1
    report = await _api(generated, "submitReport").asyncio_detailed(
        "github.com", "acme", "generated", client=submitting, body=body
    )
    assert report.status_code == 201, report.content
    assert isinstance(report.parsed, models.Report) and report.parsed.kind.value == "report"

    check = await _api(generated, "recordCheck").asyncio_detailed(
        report.parsed.findings[0].canonical_public_id,
        client=api_client(await create_token(reviewer.id, ["findings:verify"])),
        body=models.CheckSubmission.from_dict(support.check_body()),
    )
    assert check.status_code == 201, check.content
    assert isinstance(check.parsed, models.Check) and check.parsed.counted is True

    line = {"repository": "github.com/acme/generated", **report_body(run_id="generated-batch")}
    types = importlib.import_module(f"{PACKAGE}.types")
    batch = await _api(generated, "submitReportBatch").asyncio_detailed(
        # bytes, not a file: an async client cannot stream a synchronous file
        client=submitting,
        body=types.File(payload=json.dumps(line).encode() + b"\n"),
    )
    assert batch.status_code == 200, batch.content
    assert [json.loads(x)["status"] for x in batch.parsed.payload.read().splitlines()] == [201]

    badge = await _api(generated, "getRepositoryBadge").asyncio_detailed(
        "github.com", "acme", "generated", client=submitting
    )
    assert badge.status_code == 200 and isinstance(badge.parsed, str) and "<svg" in badge.parsed
    home = await _api(generated, "getHome").asyncio_detailed(client=submitting)
    assert home.status_code == 200 and isinstance(home.parsed, models.Home)


def test_every_enum_and_const_is_typed_and_every_media_type_has_a_schema() -> None:
    untyped: list[str] = []

    def walk(node: Any, at: str) -> None:
        if isinstance(node, dict):
            if ("enum" in node or "const" in node) and "type" not in node:
                untyped.append(at)
            for key, value in node.items():
                walk(value, f"{at}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{at}[{i}]")

    walk(DOCUMENT, "")
    assert not untyped
    bare = [
        f"{method} {path} {status} {media}"
        for path, item in DOCUMENT["paths"].items()
        for method, operation in item.items()
        for status, answer in operation["responses"].items()
        for media, content in answer.get("content", {}).items()
        if "schema" not in content
    ]
    assert not bare
    schemas = DOCUMENT["components"]["schemas"]
    assert "tarakan_scan_format" in schemas["ScanDocument"]["required"]
    assert DOCUMENT["paths"]["/exports/findings.ndjson.gz"]["get"]["responses"]["200"]["content"] == {
        "application/gzip": {"schema": {"type": "string", "format": "binary"}}
    }
