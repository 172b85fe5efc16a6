"""The OpenAPI 3.1 document of the API and the public JSON twins (`/api/v1/openapi.json`): the paths here, the schemas
generated from the typed answers (docs/architecture.md "Answers")."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from app.exports.types import ExportManifest
from app.feed.entries import CHANGE_RECEIVER
from app.feed.types import ChangePage
from app.infestations.rows import STATUS_CHOICES
from app.infestations.types import InfestationList, InfestationShow, InstancePage
from app.kernel.answers import Errors
from app.kernel.openapi import (
    BINARY_BODY,
    TEXT_BODY,
    UUID,
    Schema,
    components,
    delete,
    document_get,
    error_responses,
    export_get,
    get,
    gone,
    json_answer,
    param,
    post,
    ref,
    secured_get,
)
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
from app.site.openapi_batch import BATCH
from app.site.openapi_disclosure import DISCLOSURE_PATHS, DISCLOSURE_WEBHOOKS
from app.site.types import FindingRecord, Home, RepositoryRecord, Tombstone
from app.trust.types import PrecisionAnswer, ReviewQueue, SignalAnswer

_REPO_PARAMS = [param("host"), param("owner"), param("name")]


def _bodiless_post(operation_id: str, summary: str, answers: Schema, params: list[Schema]) -> Schema:
    """A POST that takes no fields (app.maintainers.routes): no body, or `{}`."""
    return post(operation_id, summary, NoBody, answers, params, required=False)


_FEED_LIMIT = "^0*(?:[1-9][0-9]{0,2}|1000)$"  # ASCII digits, 1..1000 (app.feed.routes)
_KEY = param("pattern_key", schema={"type": "string"}, description="64 lowercase hex characters")
_CURSOR = param("cursor", "query", description="the `next_cursor` of the previous page")


_SCAN_ID = param("scan_id", schema={"type": "string", "pattern": "^[0-9]+$"})
_WEBHOOK_ID = param("webhook_id", schema={"type": "string", "pattern": "^[0-9]+$"})
_ERROR_RESPONSES = error_responses()
DOCUMENT: Schema = {
    "openapi": "3.1.0",
    "info": {
        "title": "Tarakan API",
        "version": "1",
        "description": "The report API (bearer tokens) and the public JSON twins of the site's pages "
        '(the `.json` suffix). Every error is `{"errors": {field: [messages]}}`.',
    },
    "paths": {
        "/api/v1/repositories": post(
            "registerRepository",
            "Register a repository (scope repositories:write or findings:submit)",
            RepositoryRegistration,
            {
                "201": json_answer(ref(Repository), "Registered"),
                "200": json_answer(ref(Repository), "Already registered"),
            },
            [],
        ),
        "/api/v1/repos/{host}/{owner}/{name}/reports": post(
            "submitReport",
            "Submit a report (scope findings:submit or reviews:submit)",
            ReportSubmission,
            {
                "201": json_answer(ref(Report), "Stored (a SARIF log's answer adds `sarif`: a SarifSummary)"),
                "200": json_answer(ref(Report), "A retry of a run already stored: the stored report"),
            },
            [
                *_REPO_PARAMS,
                param("commit_sha", "query", description="SARIF only: the commit when the log names none"),
                param(
                    "source_root",
                    "query",
                    description="SARIF only: the absolute checkout path the log's absolute file: URIs lie under",
                ),
                param("disclosure_days", "query", description="SARIF only: an embargo of 7-90 days (disclosure.days)"),
            ],
            also={"application/sarif+json": SarifLog},
        ),
        "/api/v1/reports/batch": BATCH,
        "/api/v1/findings/{canonical_public_id}/checks": post(
            "recordCheck",
            "Record a check of a canonical finding (scope findings:verify or reviews:verify)",
            CheckSubmission,
            {"201": json_answer(ref(Check), "Recorded")},
            [param("canonical_public_id", schema=UUID)],
        ),
        "/api/v1/reports/{scan_id}/confirmations": post(
            "recordConfirmation",
            "Record a report-level verdict (scope findings:verify or reviews:verify)",
            ConfirmationSubmission,
            {"201": json_answer(ref(Confirmation), "Recorded")},
            [_SCAN_ID],
        ),
        "/api/v1/openapi.json": {
            "get": {
                "operationId": "getOpenapiDocument",
                "summary": "This document",
                "responses": {"200": json_answer({"type": "object"}, "OpenAPI 3.1")},
            }
        },
        **DISCLOSURE_PATHS,
        "/index.json": get("getHome", "The home page's twin: stats, infestations, recent reports", Home),
        "/api/v1/account/signal": secured_get(
            "getAccountSignal", "The caller's own signal (any scope)", SignalAnswer, []
        ),
        "/stats/precision.json": get("getPrecision", "Precision by provenance, model and tool rule", PrecisionAnswer),
        "/api/v1/reports/{scan_id}": secured_get("getReport", "A report and its evidence now", Report, [_SCAN_ID]),
        "/api/v1/review-queue": secured_get("getReviewQueue", "Held findings, oldest first", ReviewQueue, [_CURSOR]),
        "/infestations.json": get(
            "listInfestations",
            "The atlas: ranked infestations (filters are clamped, never refused)",
            InfestationList,
            [
                param("days", "query", None, "1..365, default 30"),
                param("min_repos", "query", None, "default 2"),
                param("status", "query", None, "one of " + ", ".join(STATUS_CHOICES)),
                param("limit", "query", None, "default 50"),
            ],
        ),
        "/infestations/{pattern_key}.json": get(
            "getInfestation",
            "One infestation: counts, affected repositories, ledger",
            InfestationShow,
            [_KEY, _CURSOR, param("repos_cursor", "query")],
        ),
        "/infestations/{pattern_key}/instances.json": get(
            "listInfestationInstances", "A page of an infestation's ledger", InstancePage, [_KEY, _CURSOR]
        ),
        "/repos/{host}/{owner}/{name}.json": get(
            "getRepository", "A repository's record: its reports and infestations", RepositoryRecord, _REPO_PARAMS
        ),
        "/repos/{host}/{owner}/{name}/findings.sarif": document_get(
            "getRepositorySarif",
            "A listed repository's public findings as one SARIF 2.1.0 log (docs/sarif.md)",
            {"application/sarif+json": {"schema": {"type": "object"}}},
            {"application/json": {"schema": ref(Errors)}},
            _REPO_PARAMS,
        ),
        "/repos/{host}/{owner}/{name}/badge.svg": document_get(
            "getRepositoryBadge",
            'A listed repository\'s badge: "tarakan | N open", "clean" or "not scanned"',
            {"image/svg+xml": {"schema": TEXT_BODY}},
            {"text/html": {"schema": TEXT_BODY}},
            _REPO_PARAMS,
        ),
        "/findings/{ref}.json": gone(
            get("getFinding", "A finding's record and its checks", FindingRecord, [param("ref", schema=UUID)]),
            Tombstone,
        ),
        "/api/v1/changes": get(
            "listChanges",
            "The change feed, oldest first: what became public, changed status or was withdrawn (no token)",
            ChangePage,
            [_CURSOR, param("limit", "query", {"type": "string", "pattern": _FEED_LIMIT}, "1..1000, default 100")],
        ),
        "/search.json": get(
            "searchRepositories", "Search repositories", Search, [param("q", "query"), param("limit", "query")]
        ),
        "/exports/manifest.json": export_get(
            "getExportManifest",
            "The newest bulk export's manifest (ETag)",
            {"application/json": {"schema": ref(ExportManifest)}},
        ),
        **{
            f"/exports/{name}.ndjson.gz": export_get(
                "getExport" + name.capitalize(),
                "A file of the newest bulk export: gzipped NDJSON, one record per line (docs/schemas/); ETag is its "
                "sha256, Range and If-Range supported",
                {"application/gzip": {"schema": BINARY_BODY}},
            )
            for name in ("repositories", "findings", "patterns", "precision")
        },
        # maintainers (docs/domain.md §14)
        "/api/v1/repos/{host}/{owner}/{name}/claims": _bodiless_post(
            "claimRepository",
            "Claim a listed repository: a one-time token to commit as a line of .tarakan/verify.txt on its default "
            "branch (scope repositories:maintain)",
            {
                "201": json_answer(ref(ClaimAnswer), "Claimed: the pending claim"),
                "200": json_answer(ref(ClaimAnswer), "Claimed already: the pending claim, same token"),
            },
            _REPO_PARAMS,
        ),
        "/api/v1/claims/{claim_id}/verify": _bodiless_post(
            "verifyClaim",
            "Verify a claim against the forge's .tarakan/verify.txt (scope repositories:maintain): 422 naming `token` "
            "when the file is missing or holds another token, 503 naming `forge` when the forge fails",
            {"200": json_answer(ref(ClaimAnswer), "Verified: the account maintains the repository")},
            [param("claim_id", schema={"type": "string", "pattern": "^[0-9]+$"})],
        ),
        "/api/v1/findings/{canonical_public_id}/statements": post(
            "recordStatement",
            "Record a maintainer's OpenVEX statement on a public canonical finding (scope repositories:maintain; a "
            "verified maintainer of its repository): 404 for an unknown or non-public finding before 403, 422 naming "
            "the field that breaks OpenVEX's rules or carries a secret",
            StatementSubmission,
            {"201": json_answer(ref(StatementAnswer), "Recorded: the finding's current statement")},
            [param("canonical_public_id", schema=UUID)],
        ),
        "/repos/{host}/{owner}/{name}/vex.json": document_get(
            "getRepositoryVex",
            "A listed repository's current maintainer statements as one OpenVEX 0.2.0 document (404 when it has none)",
            {"application/json": {"schema": ref(VexDocument)}},
            {"application/json": {"schema": ref(Errors)}},
            _REPO_PARAMS,
        ),
        # maintainers' webhooks (docs/domain.md §14 "Webhooks")
        "/api/v1/repos/{host}/{owner}/{name}/webhooks": post(
            "registerWebhook",
            "Register a webhook for a repository you maintain (scope repositories:maintain): every change-feed entry "
            "about it is POSTed there, signed (X-Tarakan-Signature-256, and X-Tarakan-Signature-V2 over "
            "X-Tarakan-Timestamp) with the secret shown once in this answer; 422 naming `url` for a refused "
            "destination (https on port 443 or 8443, a public host), 409 past 5 webhooks of current maintainers",
            WebhookRegistration,
            {"201": json_answer(ref(NewWebhookAnswer), "Registered: the webhook and its secret (shown only here)")},
            _REPO_PARAMS,
        )
        | secured_get(
            "listWebhooks", "Your webhooks of a repository (scope repositories:maintain)", WebhookList, _REPO_PARAMS
        ),
        "/api/v1/webhooks/{webhook_id}": secured_get(
            "getWebhook",
            "One of your webhooks; `disabled_at` is set when it failed for 24 hours (scope repositories:maintain)",
            WebhookAnswer,
            [_WEBHOOK_ID],
        )
        | delete(
            "deleteWebhook",
            "Delete one of your webhooks and its delivery log (scope repositories:maintain)",
            [_WEBHOOK_ID],
        ),
        "/api/v1/webhooks/{webhook_id}/enable": _bodiless_post(
            "enableWebhook",
            "Enable a disabled webhook again: the entry that failed is sent at once, then the rest in order (scope "
            "repositories:maintain; a current maintainer of its repository)",
            {"200": json_answer(ref(WebhookAnswer), "Enabled (an enabled webhook answers as it is)")},
            [_WEBHOOK_ID],
        ),
        "/api/v1/webhooks/{webhook_id}/deliveries": secured_get(
            "listWebhookDeliveries",
            "A webhook's delivery log, newest entry first (scope repositories:maintain)",
            DeliveryPage,
            [
                _WEBHOOK_ID,
                _CURSOR,
                param("limit", "query", {"type": "string", "pattern": "^0*(?:[1-9][0-9]?|100)$"}, "1..100, default 50"),
            ],
        ),
    },
    # what a maintainer's webhook receives (domain §14 "Webhooks"), and what it is told of an embargoed finding
    "webhooks": {"change": CHANGE_RECEIVER, **DISCLOSURE_WEBHOOKS},
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "an API token"}},
        "schemas": components(),
        "responses": _ERROR_RESPONSES,
    },
}


async def openapi_json(request: Request) -> Response:
    return JSONResponse(DOCUMENT, headers={"Cache-Control": "public, max-age=300"})


routes: list[BaseRoute] = [Route("/api/v1/openapi.json", openapi_json, methods=["GET", "HEAD"], name="openapi")]
