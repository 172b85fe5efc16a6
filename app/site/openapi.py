"""The OpenAPI 3.1 document of the JSON API (`/api/v1/...`) and of the public JSON twins, served at
`/api/v1/openapi.json` (docs/domain.md §6.1 twins, §9 the report format; docs/security.md the error shape).

The paths are written here; the schemas are generated from the typed answers the serializers build (each
feature's `types.py`, docs/architecture.md "Answers"). tests/site/test_openapi.py checks real answers against it
and that every API and twin route of the router is described.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from app.exports.types import ExportManifest
from app.feed.types import ChangePage
from app.infestations.types import STATUS_CHOICES, InfestationList, InfestationShow, InstancePage
from app.kernel.answers import Errors, openapi_components
from app.maintainers.statement_types import StatementAnswer, StatementSubmission
from app.maintainers.types import ClaimAnswer, NoBody
from app.maintainers.vex import VexDocument
from app.maintainers.webhook_types import (
    DeliveryPage,
    NewWebhookAnswer,
    WebhookAnswer,
    WebhookList,
    WebhookRegistration,
)
from app.registry.types import Repository, RepositoryRegistration, Search
from app.reports.types import EXAMPLE_COMMIT as EXAMPLE_COMMIT  # the commit the fuzz suite seeds its examples at
from app.reports.types import (
    Check,
    CheckSubmission,
    Confirmation,
    ConfirmationSubmission,
    Report,
    ReportSubmission,
    SarifLog,
)
from app.site.types import FindingRecord, Home, RepositoryRecord, Tombstone

Schema = dict[str, Any]

UUID: Schema = {"type": "string", "format": "uuid"}


_NAMED: dict[str, type] = {}  # the types the paths name: they and every type they reach are the components


def _ref(kind: type) -> Schema:
    _NAMED[kind.__name__] = kind
    return {"$ref": f"#/components/schemas/{kind.__name__}"}


_ERROR_TEXT = {
    "400": "Malformed request: not JSON, not an object, too deep, a bad cursor or identifier",
    "401": "No or unknown bearer token",
    "403": "The token lacks the scope, or the account may not act here",
    "404": "Unknown or hidden resource (the same answer for both)",
    "409": "Conflicts with the current state",
    "413": "Body larger than the limit",
    "422": "A field broke a rule: `errors` names the field and the rule",
    "429": "A rate limit or daily quota: see `Retry-After`",
    "503": "Load shedding or a dependency outage: see `Retry-After`",
}


def _error(code: str) -> Schema:
    return {"$ref": f"#/components/responses/E{code}"}


_API_ERRORS = ("400", "401", "403", "404", "409", "413", "422", "429", "503")
_TWIN_ERRORS = ("400", "404", "413", "422", "503")


def _json(schema: Schema, description: str) -> Schema:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


# what the edge lets through (app.kernel.limits.edge_refusal, app.kernel.text): a path segment with a control
# character is a 404, a query value with one (tab and line breaks aside) a 400
PATH_TEXT: Schema = {"type": "string", "pattern": "^[^\\x00-\\x1f\\x7f-\\x9f]*$"}
QUERY_TEXT: Schema = {"type": "string", "pattern": "^[^\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f-\\x9f]*$"}


def _param(name: str, where: str = "path", schema: Schema | None = None, description: str = "") -> Schema:
    """A parameter; its schema defaults to the text the edge lets through (a route reads it further)."""
    default = PATH_TEXT if where == "path" else QUERY_TEXT
    param: Schema = {"name": name, "in": where, "required": where == "path", "schema": schema or default}
    if description:
        param["description"] = description
    return param


def _post(summary: str, body: type, answers: dict[str, Schema], params: list[Schema], *, sarif: bool = False) -> Schema:
    content = {"application/json": {"schema": _ref(body)}}
    if sarif:
        content["application/sarif+json"] = {"schema": _ref(SarifLog)}
    return {
        "post": {
            "summary": summary,
            "security": [{"bearer": []}],
            "parameters": params,
            "requestBody": {"required": True, "content": content},
            "responses": answers | {code: _error(code) for code in _API_ERRORS},
        }
    }


def _get(summary: str, schema: type, params: list[Schema] | None = None) -> Schema:
    return {
        "get": {
            "summary": summary,
            "parameters": params or [],
            "responses": {"200": _json(_ref(schema), summary)} | {code: _error(code) for code in _TWIN_ERRORS},
        }
    }


def _gone(operation: Schema) -> Schema:
    """A record that answers 410 Gone once withdrawn (a tombstone: id, time, reason class)."""
    operation["get"]["responses"]["410"] = _json(_ref(Tombstone), "Withdrawn: the tombstone, nothing else")
    return operation


def _export_get(summary: str, content: Schema) -> Schema:
    """A bulk export document (app.exports.routes): 404 before the first export, 503 while the newest one is being
    rebuilt after a takedown (plain text for the files, like feeds)."""
    unavailable = {"description": "Rebuilding after a takedown: see `Retry-After`", "content": {"text/plain": {}}}
    answers: dict[str, Schema] = {
        "200": {"description": summary, "content": content},
        "206": {"description": "The requested range", "content": content},
        "304": {"description": "Not modified (If-None-Match)"},
        "404": _error("404"),
        "416": {"description": "Range not satisfiable", "content": {"text/plain": {}}},
        "503": _error("503") if "application/json" in content else unavailable,
    }
    return {"get": {"summary": summary, "parameters": [], "responses": answers}}


_REPO_PARAMS = [_param("host"), _param("owner"), _param("name")]


def _document_get(summary: str, content: Schema, errors: Schema) -> Schema:
    """A public document of a listed repository (app.site.sarif, app.site.badge): ETag, 404 when not listed."""
    answers: dict[str, Schema] = {
        "200": {"description": summary, "content": content},
        "304": {"description": "Not modified (If-None-Match)"},
        "404": {"description": "No listed repository at this address", "content": errors},
        "503": {"description": "Dependency outage: see `Retry-After`", "content": errors},
    }
    return {"get": {"summary": summary, "parameters": _REPO_PARAMS, "responses": answers}}


def _bodiless_post(summary: str, answers: dict[str, Schema], params: list[Schema]) -> Schema:
    """A POST that takes no fields (app.maintainers.routes): no body, or `{}`."""
    operation = _post(summary, NoBody, answers, params)
    operation["post"]["requestBody"]["required"] = False
    return operation


_FEED_LIMIT = "^0*(?:[1-9][0-9]{0,2}|1000)$"  # ASCII digits, 1..1000 (app.feed.routes)
_KEY = _param("pattern_key", schema={"type": "string"}, description="64 lowercase hex characters")
_CURSOR = _param("cursor", "query", description="the `next_cursor` of the previous page")

_GET_ERRORS = ("400", "401", "403", "404", "503")


def _secured_get(summary: str, schema: type, params: list[Schema]) -> Schema:
    """A GET of the API that needs a bearer token (a maintainer's webhooks)."""
    operation = _get(summary, schema, params)["get"]
    operation["security"] = [{"bearer": []}]
    operation["responses"] = {"200": operation["responses"]["200"]} | {code: _error(code) for code in _GET_ERRORS}
    return {"get": operation}


def _delete(summary: str, params: list[Schema]) -> Schema:
    """A DELETE that takes no body (if one is sent: empty or `{}`): 204."""
    return {
        "delete": {
            "summary": summary,
            "security": [{"bearer": []}],
            "parameters": params,
            "responses": {"204": {"description": "Deleted"}} | {code: _error(code) for code in _API_ERRORS},
        }
    }


_WEBHOOK_ID = _param("webhook_id", schema={"type": "string", "pattern": "^[0-9]+$"})
_ERROR_RESPONSES = {f"E{code}": _json(_ref(Errors), text) for code, text in _ERROR_TEXT.items()}
DOCUMENT: Schema = {
    "openapi": "3.1.0",
    "info": {
        "title": "Tarakan API",
        "version": "1",
        "description": "The report API (bearer tokens) and the public JSON twins of the site's pages "
        '(the `.json` suffix). Every error is `{"errors": {field: [messages]}}`.',
    },
    "paths": {
        "/api/v1/repositories": _post(
            "Register a repository (scope repositories:write or findings:submit)",
            RepositoryRegistration,
            {
                "201": _json(_ref(Repository), "Registered"),
                "200": _json(_ref(Repository), "Already registered"),
            },
            [],
        ),
        "/api/v1/repos/{host}/{owner}/{name}/reports": _post(
            "Submit a report (scope findings:submit or reviews:submit)",
            ReportSubmission,
            {
                "201": _json(_ref(Report), "Stored (a SARIF log's answer adds `sarif`: a SarifSummary)"),
                "200": _json(_ref(Report), "A retry of a run already stored: the stored report"),
            },
            [
                *_REPO_PARAMS,
                _param("commit_sha", "query", description="SARIF only: the commit when the log names none"),
                _param(
                    "source_root",
                    "query",
                    description="SARIF only: the absolute checkout path the log's absolute file: URIs lie under",
                ),
            ],
            sarif=True,
        ),
        "/api/v1/findings/{canonical_public_id}/checks": _post(
            "Record a check of a canonical finding (scope findings:verify or reviews:verify)",
            CheckSubmission,
            {"201": _json(_ref(Check), "Recorded")},
            [_param("canonical_public_id", schema=UUID)],
        ),
        "/api/v1/reports/{scan_id}/confirmations": _post(
            "Record a report-level verdict (scope findings:verify or reviews:verify)",
            ConfirmationSubmission,
            {"201": _json(_ref(Confirmation), "Recorded")},
            [_param("scan_id", schema={"type": "string", "pattern": "^[0-9]+$"})],
        ),
        "/api/v1/openapi.json": {
            "get": {"summary": "This document", "responses": {"200": _json({"type": "object"}, "OpenAPI 3.1")}}
        },
        "/index.json": _get("The home page's twin: stats, infestations, recent reports", Home),
        "/infestations.json": _get(
            "The atlas: ranked infestations (filters are clamped, never refused)",
            InfestationList,
            [
                _param("days", "query", None, "1..365, default 30"),
                _param("min_repos", "query", None, "default 2"),
                _param("status", "query", None, "one of " + ", ".join(STATUS_CHOICES)),
                _param("limit", "query", None, "default 50"),
            ],
        ),
        "/infestations/{pattern_key}.json": _get(
            "One infestation: counts, affected repositories, ledger",
            InfestationShow,
            [_KEY, _CURSOR, _param("repos_cursor", "query")],
        ),
        "/infestations/{pattern_key}/instances.json": _get(
            "A page of an infestation's ledger", InstancePage, [_KEY, _CURSOR]
        ),
        "/repos/{host}/{owner}/{name}.json": _get(
            "A repository's record: its reports and infestations", RepositoryRecord, _REPO_PARAMS
        ),
        "/repos/{host}/{owner}/{name}/findings.sarif": _document_get(
            "A listed repository's public findings as one SARIF 2.1.0 log (docs/sarif.md)",
            {"application/sarif+json": {"schema": {"type": "object"}}},
            {"application/json": {"schema": _ref(Errors)}},
        ),
        "/repos/{host}/{owner}/{name}/badge.svg": _document_get(
            'A listed repository\'s badge: "tarakan | N open", "clean" or "not scanned"',
            {"image/svg+xml": {}},
            {"text/html": {}},
        ),
        "/findings/{ref}.json": _gone(
            _get("A finding's record and its checks", FindingRecord, [_param("ref", schema=UUID)])
        ),
        "/api/v1/changes": _get(
            "The change feed, oldest first: what became public, changed status or was withdrawn (no token)",
            ChangePage,
            [_CURSOR, _param("limit", "query", {"type": "string", "pattern": _FEED_LIMIT}, "1..1000, default 100")],
        ),
        "/search.json": _get("Search repositories", Search, [_param("q", "query"), _param("limit", "query")]),
        "/exports/manifest.json": _export_get(
            "The newest bulk export's manifest (ETag)", {"application/json": {"schema": _ref(ExportManifest)}}
        ),
        **{
            f"/exports/{name}": _export_get(
                "A file of the newest bulk export: gzipped NDJSON, one record per line (docs/schemas/); ETag is its "
                "sha256, Range and If-Range supported",
                {"application/gzip": {}},
            )
            for name in ("repositories.ndjson.gz", "findings.ndjson.gz", "patterns.ndjson.gz")
        },
        # maintainers (docs/domain.md §14)
        "/api/v1/repos/{host}/{owner}/{name}/claims": _bodiless_post(
            "Claim a listed repository: a one-time token to commit as a line of .tarakan/verify.txt on its default "
            "branch (scope repositories:maintain)",
            {
                "201": _json(_ref(ClaimAnswer), "Claimed: the pending claim"),
                "200": _json(_ref(ClaimAnswer), "Claimed already: the pending claim, same token"),
            },
            _REPO_PARAMS,
        ),
        "/api/v1/claims/{claim_id}/verify": _bodiless_post(
            "Verify a claim against the forge's .tarakan/verify.txt (scope repositories:maintain): 422 naming `token` "
            "when the file is missing or holds another token, 503 naming `forge` when the forge fails",
            {"200": _json(_ref(ClaimAnswer), "Verified: the account maintains the repository")},
            [_param("claim_id", schema={"type": "string", "pattern": "^[0-9]+$"})],
        ),
        "/api/v1/findings/{canonical_public_id}/statements": _post(
            "Record a maintainer's OpenVEX statement on a public canonical finding (scope repositories:maintain; a "
            "verified maintainer of its repository): 404 for an unknown or non-public finding before 403, 422 naming "
            "the field that breaks OpenVEX's rules or carries a secret",
            StatementSubmission,
            {"201": _json(_ref(StatementAnswer), "Recorded: the finding's current statement")},
            [_param("canonical_public_id", schema=UUID)],
        ),
        "/repos/{host}/{owner}/{name}/vex.json": _document_get(
            "A listed repository's current maintainer statements as one OpenVEX 0.2.0 document (404 when it has none)",
            {"application/json": {"schema": _ref(VexDocument)}},
            {"application/json": {"schema": _ref(Errors)}},
        ),
        # maintainers' webhooks (docs/domain.md §14 "Webhooks")
        "/api/v1/repos/{host}/{owner}/{name}/webhooks": _post(
            "Register a webhook for a repository you maintain (scope repositories:maintain): every change-feed entry "
            "about it is POSTed there, signed (X-Tarakan-Signature-256) with the secret shown once in this answer; "
            "422 naming `url` for a refused destination, 409 past 5 webhooks",
            WebhookRegistration,
            {"201": _json(_ref(NewWebhookAnswer), "Registered: the webhook and its secret (shown only here)")},
            _REPO_PARAMS,
        )
        | _secured_get("Your webhooks of a repository (scope repositories:maintain)", WebhookList, _REPO_PARAMS),
        "/api/v1/webhooks/{webhook_id}": _secured_get(
            "One of your webhooks; `disabled_at` is set when it failed for 24 hours (scope repositories:maintain)",
            WebhookAnswer,
            [_WEBHOOK_ID],
        )
        | _delete("Delete one of your webhooks and its delivery log (scope repositories:maintain)", [_WEBHOOK_ID]),
        "/api/v1/webhooks/{webhook_id}/enable": _bodiless_post(
            "Enable a disabled webhook again: the entry that failed is sent at once, then the rest in order (scope "
            "repositories:maintain; a current maintainer of its repository)",
            {"200": _json(_ref(WebhookAnswer), "Enabled (an enabled webhook answers as it is)")},
            [_WEBHOOK_ID],
        ),
        "/api/v1/webhooks/{webhook_id}/deliveries": _secured_get(
            "A webhook's delivery log, newest entry first (scope repositories:maintain)",
            DeliveryPage,
            [
                _WEBHOOK_ID,
                _CURSOR,
                _param(
                    "limit", "query", {"type": "string", "pattern": "^0*(?:[1-9][0-9]?|100)$"}, "1..100, default 50"
                ),
            ],
        ),
    },
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "an API token"}},
        "schemas": openapi_components(_NAMED.values()),
        "responses": _ERROR_RESPONSES,
    },
}


async def openapi_json(request: Request) -> Response:
    return JSONResponse(DOCUMENT, headers={"Cache-Control": "public, max-age=300"})


routes: list[BaseRoute] = [Route("/api/v1/openapi.json", openapi_json, methods=["GET", "HEAD"], name="openapi")]
