"""The OpenAPI document at `/api/v1/openapi.json`: a valid OpenAPI 3.1 document, served as JSON, describing every
API and JSON-twin route of the router, and true of real answers (a submitted report, a check, a confirmation,
a registration, the twins, an error)."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
from openapi_schema_validator import OAS31Validator
from openapi_spec_validator import validate
from starlette.routing import BaseRoute, Mount, Route

from app.accounts.service import create_token
from app.main import app
from e2e.seed import seed_pattern
from tests import factories
from tests.reports import support
from tests.reports.support import COMMIT, NOTES, report_body


async def _document(client: httpx.AsyncClient) -> dict[str, Any]:
    response = await client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    document: dict[str, Any] = response.json()
    return document


def _conforms(document: dict[str, Any], path: str, method: str, response: httpx.Response) -> None:
    """The answer's body validates against the schema the document gives for its path, method and status."""
    answers = document["paths"][path][method]["responses"]
    answer = answers[str(response.status_code)]
    if "$ref" in answer:
        answer = document["components"]["responses"][answer["$ref"].rsplit("/", 1)[1]]
    schema = answer["content"]["application/json"]["schema"] | {"components": document["components"]}
    OAS31Validator(schema).validate(response.json())


def _described_path(route_path: str) -> str:
    """A router path as the document writes it: the twin's `.json` suffix, no convertors."""
    path = re.sub(r"\{format:(format|twin)\}", ".json", route_path)
    return re.sub(r"\{(\w+):\w+\}", r"{\1}", path)


def _twin_and_api_routes(routes: list[BaseRoute]) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for route in routes:
        if isinstance(route, Mount):
            continue
        assert isinstance(route, Route)
        if route.path.startswith("/api/") or "format" in route.param_convertors:
            for method in route.methods or ():
                if method != "HEAD":
                    found.add((_described_path(route.path), method.lower()))
    return found


async def test_the_document_is_valid_openapi_31_served_as_json(client: httpx.AsyncClient) -> None:
    document = await _document(client)
    assert document["openapi"].startswith("3.1")
    validate(document)


async def test_every_api_and_twin_route_is_described(client: httpx.AsyncClient) -> None:
    document = await _document(client)
    routes = _twin_and_api_routes(app.routes)
    assert ("/api/v1/repos/{host}/{owner}/{name}/reports", "post") in routes  # the walk sees the API
    assert ("/infestations/{pattern_key}.json", "get") in routes  # and the twins
    missing = {(path, method) for path, method in routes if method not in document["paths"].get(path, {})}
    assert not missing


async def test_the_api_answers_conform_to_the_document(client: httpx.AsyncClient) -> None:
    document = await _document(client)
    account = await factories.create_account(state="active")
    headers = {"Authorization": "Bearer " + await create_token(account.id, ["findings:submit"])}

    registered = await client.post(
        "/api/v1/repositories", headers=headers, json={"host": "github.com", "owner": "acme", "name": "openapi"}
    )
    assert registered.status_code == 201, registered.text
    _conforms(document, "/api/v1/repositories", "post", registered)

    path = "/api/v1/repos/{host}/{owner}/{name}/reports"
    report = await client.post(
        "/api/v1/repos/github.com/acme/openapi/reports", headers=headers, content=json.dumps(report_body())
    )
    assert report.status_code == 201, report.text
    _conforms(document, path, "post", report)

    refused = await client.post(
        "/api/v1/repos/github.com/acme/openapi/reports", headers=headers, content=json.dumps({"commit_sha": "x"})
    )
    assert refused.status_code == 422
    _conforms(document, path, "post", refused)

    reviewer = await support.reviewer()
    reviewer_headers = {"Authorization": "Bearer " + await create_token(reviewer.id, ["findings:verify"])}
    canonical = report.json()["findings"][0]["canonical_public_id"]
    check = await client.post(
        f"/api/v1/findings/{canonical}/checks",
        headers=reviewer_headers,
        json={"commit_sha": COMMIT, "verdict": "confirmed", "notes": NOTES},
    )
    assert check.status_code == 201, check.text
    _conforms(document, "/api/v1/findings/{canonical_public_id}/checks", "post", check)

    confirmation = await client.post(
        f"/api/v1/reports/{report.json()['id']}/confirmations",
        headers=reviewer_headers,
        json={"verdict": "confirmed", "notes": NOTES},
    )
    assert confirmation.status_code == 201, confirmation.text
    _conforms(document, "/api/v1/reports/{scan_id}/confirmations", "post", confirmation)

    finding = await client.get(f"/findings/{report.json()['findings'][0]['public_id']}.json")
    assert finding.status_code == 200, finding.text
    _conforms(document, "/findings/{ref}.json", "get", finding)
    record = await client.get("/repos/github.com/acme/openapi.json")
    assert record.status_code == 200, record.text
    _conforms(document, "/repos/{host}/{owner}/{name}.json", "get", record)


async def test_the_twins_conform_to_the_document(client: httpx.AsyncClient) -> None:
    document = await _document(client)
    seeded = await seed_pattern("OpenAPI twin pattern", repos=2)
    for path, url in (
        ("/index.json", "/index.json"),
        ("/infestations.json", "/infestations.json?min_repos=2"),
        ("/infestations/{pattern_key}.json", f"/infestations/{seeded.key}.json"),
        ("/infestations/{pattern_key}/instances.json", f"/infestations/{seeded.key}/instances.json"),
        ("/search.json", "/search.json?q=acme"),
        ("/infestations/{pattern_key}.json", "/infestations/" + "0" * 64 + ".json"),
    ):
        response = await client.get(url)
        # only the unknown pattern is a 404: every other path reads seeded rows
        assert response.status_code == (404 if "0" * 64 in url else 200), url
        _conforms(document, path, "get", response)
    assert (await client.get("/infestations.json")).json()["items"], "the seeded pattern is listed"


def _open_objects(document: dict[str, Any], schema: Any, at: str, seen: set[str]) -> list[str]:
    """Where an object schema reachable from `schema` lists properties but allows others."""
    if isinstance(schema, list):
        return [p for i, item in enumerate(schema) for p in _open_objects(document, item, f"{at}[{i}]", seen)]
    if not isinstance(schema, dict):
        return []
    if "$ref" in schema:
        ref = schema["$ref"]
        if ref in seen:
            return []
        seen.add(ref)
        target = document
        for part in ref.removeprefix("#/").split("/"):
            target = target[part]
        return _open_objects(document, target, ref, seen)
    found = [at] if "properties" in schema and schema.get("additionalProperties") is not False else []
    return found + [p for key, value in schema.items() for p in _open_objects(document, value, f"{at}.{key}", seen)]


async def test_every_answer_object_is_closed_so_the_fuzz_suite_sees_an_undocumented_key(
    client: httpx.AsyncClient,
) -> None:
    document = await _document(client)
    answers = [
        (f"{method.upper()} {path} {status}", answer)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        for status, answer in operation["responses"].items()
    ]
    assert len(answers) > 50
    open_objects = [p for label, answer in answers for p in _open_objects(document, answer, label, set())]
    assert not open_objects, sorted(set(open_objects))
