"""The OpenAPI 3.1 document of the JSON API (`/api/v1/...`) and of the public JSON twins, served at
`/api/v1/openapi.json` (docs/domain.md §6.1 twins, §9 the report format; docs/security.md the error shape).

The document is data: the enums come from the modules that own them, the shapes mirror the serializers
(`app.reports.serializers`, `app.registry.api`) and the twins (`app.site.routes`, `app.site.records`,
`app.infestations.routes`, `app.registry.routes`); tests/site/test_openapi.py checks real answers against it and
that every API and twin route of the router is described.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from app.infestations.models import COUNTS
from app.infestations.routes import STATUS_CHOICES
from app.kernel.changes import KINDS, REASONS
from app.reports.models import (
    CANONICAL_STATUSES,
    CHECK_VERDICTS,
    CONFIRMATION_VERDICTS,
    PROVENANCES,
    REVIEW_KINDS,
    SEVERITIES,
)
from app.reports.validation import (
    MAX_DESCRIPTION,
    MAX_EVIDENCE,
    MAX_FINDINGS,
    MAX_LABEL,
    MAX_LINE,
    MAX_NOTES,
    MAX_RUN_ID,
    MAX_TITLE,
)

Schema = dict[str, Any]


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(kind: str, **extra: Any) -> Schema:
    return {"type": [kind, "null"], **extra}


def _obj(required: dict[str, Schema], optional: dict[str, Schema] | None = None) -> Schema:
    """An object with exactly these properties, as the code emits them (the fuzz suite holds every answer to it).
    Later versions may add keys: clients ignore the ones they do not know."""
    return {
        "type": "object",
        "required": list(required),
        "properties": {**required, **(optional or {})},
        "additionalProperties": False,
    }


STRING: Schema = {"type": "string"}
INTEGER: Schema = {"type": "integer"}
BOOLEAN: Schema = {"type": "boolean"}
TIMESTAMP: Schema = _nullable("string", description="ISO 8601 date-time")
UUID: Schema = {"type": "string", "format": "uuid"}
SHA: Schema = {"type": "string", "pattern": "^[0-9a-f]{40}$"}
SEVERITY: Schema = {"type": "string", "enum": list(SEVERITIES)}
PROVENANCE: Schema = {"type": "string", "enum": list(PROVENANCES)}
COMMIT_SHA: Schema = {"type": "string", "pattern": r"^\s*[0-9a-fA-F]{40}\s*$", "description": "trimmed, lowercased"}
EXAMPLE_COMMIT = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
EXAMPLE_NOTES = "Reproduced with the proof of concept in the description."


CANONICAL_STATUS: Schema = {"type": "string", "enum": list(CANONICAL_STATUSES)}

_INFESTATION: dict[str, Schema] = {
    "pattern_key": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
    "title": STRING,
    "severity": _nullable("string"),
    "sample_file_path": _nullable("string", description="null once the sample's report is taken down"),
    "sample_occurrence_public_id": _nullable("string", format="uuid"),
    **{k: INTEGER for k in COUNTS},
    "last_seen_at": TIMESTAMP,
    "first_seen_at": TIMESTAMP,
}


def _page(item: Schema) -> Schema:
    """`app.kernel.paging.Page`: a keyset page."""
    return _obj({"entries": {"type": "array", "items": item}, "next_cursor": _nullable("string")})


_SCHEMAS: dict[str, Schema] = {
    "Errors": {
        "type": "object",
        "required": ["errors"],
        "additionalProperties": False,
        "properties": {
            "errors": {
                "type": "object",
                "description": "field (or `request`, `path`, ...) -> messages naming the rule broken",
                "additionalProperties": {"type": "array", "items": STRING},
            }
        },
    },
    # -- request bodies (docs/domain.md §9) --
    "ScanFinding": {
        "type": "object",
        "required": ["file", "severity", "title", "description"],
        "properties": {
            "file": {"type": "string", "description": "a safe repository-relative path (docs/domain.md §2.3)"},
            "severity": SEVERITY,
            "title": {"type": "string", "maxLength": MAX_TITLE},
            "description": {"type": "string", "maxLength": MAX_DESCRIPTION},
            "disposition": {"type": "string", "description": "ignored: recomputed by the registry"},
            "existing_finding_id": {**UUID, "description": "a hint only"},
            "line_start": {"type": "integer", "minimum": 1, "maximum": MAX_LINE},
            "line_end": {"type": "integer", "minimum": 1, "maximum": MAX_LINE, "description": "needs line_start, ≥ it"},
        },
    },
    "ScanDocument": {
        "type": "object",
        "description": "Scan Format v1 (`tarakan_review_format` is accepted as an alias key; unknown keys ignored; "
        "≤ 2,000,000 characters as stored)",
        "required": ["findings"],
        "properties": {
            "tarakan_scan_format": {"const": 1},
            "tarakan_review_format": {"const": 1},
            "findings": {"type": "array", "maxItems": MAX_FINDINGS, "items": _ref("ScanFinding")},
        },
    },
    "ReportSubmission": {
        "type": "object",
        "required": ["commit_sha", "document"],
        "examples": [
            {
                "commit_sha": EXAMPLE_COMMIT,
                "model": "gpt-5",
                "prompt_version": "review/v3",
                "run_id": "run-2026-11-30-1",
                "document": {
                    "tarakan_scan_format": 1,
                    "findings": [
                        {
                            "file": "lib/auth.py",
                            "line_start": 42,
                            "severity": "high",
                            "title": "SQL injection in login",
                            "description": "The user name is concatenated into the SQL string.",
                        }
                    ],
                },
            }
        ],
        "properties": {
            "commit_sha": COMMIT_SHA,
            "provenance": {**PROVENANCE, "default": "agent"},
            "review_kind": {"type": "string", "enum": list(REVIEW_KINDS), "default": "code_review"},
            "model": {"type": "string", "maxLength": MAX_LABEL, "description": "required unless provenance is human"},
            "prompt_version": {"type": "string", "maxLength": MAX_LABEL, "description": "as model"},
            "run_id": {"type": "string", "maxLength": MAX_RUN_ID, "description": "one report per run and account"},
            "notes": {"type": "string", "maxLength": MAX_NOTES},
            "document": _ref("ScanDocument"),
        },
    },
    "CheckSubmission": {
        "type": "object",
        "required": ["commit_sha", "verdict", "notes"],
        "examples": [
            {"commit_sha": EXAMPLE_COMMIT, "verdict": "confirmed", "provenance": "human", "notes": EXAMPLE_NOTES}
        ],
        "properties": {
            "commit_sha": COMMIT_SHA,
            "verdict": {"type": "string", "enum": list(CHECK_VERDICTS)},
            "provenance": {**PROVENANCE, "default": "agent"},
            "notes": {"type": "string", "minLength": 20, "maxLength": MAX_NOTES},
            "evidence": {"type": "string", "maxLength": MAX_EVIDENCE},
        },
    },
    "ConfirmationSubmission": {
        "type": "object",
        "required": ["verdict", "notes"],
        "examples": [{"verdict": "confirmed", "provenance": "human", "notes": EXAMPLE_NOTES}],
        "properties": {
            "verdict": {"type": "string", "enum": list(CONFIRMATION_VERDICTS)},
            "provenance": {**PROVENANCE, "default": "agent"},
            "notes": {"type": "string", "minLength": 20, "maxLength": MAX_NOTES},
            "evidence": {"type": "string", "maxLength": MAX_EVIDENCE},
        },
    },
    "RepositoryRegistration": {
        "type": "object",
        "required": ["host", "owner", "name"],
        "examples": [{"host": "github.com", "owner": "acme", "name": "widget"}],
        "properties": {"host": STRING, "owner": STRING, "name": STRING},
    },
    # -- API answers (app.reports.serializers, app.registry.api) --
    "Report": _obj(
        {
            "id": INTEGER,
            "kind": {"const": "report"},
            "repository": STRING,
            "commit_sha": SHA,
            "commit_committed_at": TIMESTAMP,
            "model": _nullable("string"),
            "prompt_version": _nullable("string"),
            "run_id": _nullable("string"),
            "provenance": PROVENANCE,
            "provenance_attestation": {"const": "self_reported"},
            "review_kind": {"type": "string", "enum": list(REVIEW_KINDS)},
            "findings_count": INTEGER,
            "verified": BOOLEAN,
            "review_status": STRING,
            "visibility": STRING,
            "disclosed": BOOLEAN,
            "record_url": STRING,
            "findings": {
                "type": "array",
                "items": _obj(
                    {
                        "public_id": UUID,
                        "canonical_public_id": _nullable("string", format="uuid"),
                        "pattern_key": _nullable("string"),
                        "title": STRING,
                        "severity": SEVERITY,
                        "disposition": STRING,
                        "url": STRING,
                    }
                ),
            },
        },
        {"sarif": _ref("SarifSummary")},  # the answer to a SARIF log only
    ),
    "Check": _obj(
        {
            "id": INTEGER,
            "canonical_public_id": UUID,
            "verdict": {"type": "string", "enum": list(CHECK_VERDICTS)},
            "commit_sha": SHA,
            "provenance": PROVENANCE,
            "status": STRING,
            "confirmations_count": INTEGER,
            "disputes_count": INTEGER,
        }
    ),
    "Confirmation": _obj(
        {
            "id": INTEGER,
            "report_id": INTEGER,
            "verdict": {"type": "string", "enum": list(CONFIRMATION_VERDICTS)},
            "provenance": PROVENANCE,
            "commit_sha": SHA,
            "confirmations_count": INTEGER,
            "disputes_count": INTEGER,
            "verified": BOOLEAN,
            "review_status": STRING,
            "checks_recorded": INTEGER,
        }
    ),
    "Repository": _obj(
        {
            "id": INTEGER,
            "host": STRING,
            "owner": STRING,
            "name": STRING,
            "canonical_url": STRING,
            "listing_status": STRING,
            "status": STRING,
            "scan_count": INTEGER,
            "open_findings_count": INTEGER,
            "verified_findings_count": INTEGER,
            "url": STRING,
        }
    ),
    # -- public twins --
    "PublicRepository": _obj(
        {
            "host": STRING,
            "owner": STRING,
            "name": STRING,
            "canonical_url": STRING,
            "status": STRING,
            "scan_count": INTEGER,
            "open_findings_count": INTEGER,
            "verified_findings_count": INTEGER,
            "last_scanned_at": TIMESTAMP,
            "description": _nullable("string"),
            "primary_language": _nullable("string"),
            "stars_count": _nullable("integer"),
            "forks_count": _nullable("integer"),
            "archived": _nullable("boolean"),
            "participation_mode": _nullable("string"),
            "listing_status": STRING,
            "url": {"type": "string", "description": "the page's path"},
        }
    ),
    # the infestation map (docs/domain.md §5.7, app.infestations.legacy.INFESTATION_KEYS): the same keys on every
    # path; counts of the requested window
    "Infestation": _obj(_INFESTATION),
    # one ledger row (docs/domain.md §4.4, INSTANCE_KEYS)
    "Instance": _obj(
        {
            "id": INTEGER,
            "public_id": UUID,
            "occurrence_public_id": _nullable("string", format="uuid"),
            "status": CANONICAL_STATUS,
            "severity": _nullable("string"),
            "title": STRING,
            "file_path": _nullable("string"),
            "detections_count": INTEGER,
            "confirmations_count": INTEGER,
            "host": STRING,
            "owner": STRING,
            "name": STRING,
            "repository_id": INTEGER,
            "commit_sha": _nullable("string"),
            "scan_id": _nullable("integer"),
            "updated_at": TIMESTAMP,
        }
    ),
    # a repository affected by the pattern (app.infestations.legacy.membership_entry)
    "AffectedRepository": _obj(
        {
            "id": INTEGER,
            "repository_id": INTEGER,
            "host": STRING,
            "owner": STRING,
            "name": STRING,
            "status": CANONICAL_STATUS,
            "severity": _nullable("string"),
            "title": _nullable("string"),
            "instance_count": INTEGER,
            "open_count": INTEGER,
            "occurrence_public_id": _nullable("string", format="uuid"),
            "updated_at": TIMESTAMP,
        }
    ),
    "InstancePage": _page(_ref("Instance")),
    "InfestationList": _obj(
        {
            "items": {"type": "array", "items": _ref("Infestation")},
            "refreshed_at": TIMESTAMP,
            "filters": _obj(
                {
                    "days": {"type": "integer", "minimum": 1, "maximum": 365},
                    "min_repos": INTEGER,
                    "status": {"type": "string", "enum": list(STATUS_CHOICES)},
                    "limit": INTEGER,
                    "counts_window_days": INTEGER,
                }
            ),
        }
    ),
    "InfestationShow": _obj(
        {
            "infestation": _ref("Infestation"),
            "refreshed_at": TIMESTAMP,
            "repositories": _page(_ref("AffectedRepository")),
            "instances": _ref("InstancePage"),
        }
    ),
    "Home": _obj(
        {
            "stats": _obj(
                {
                    k: INTEGER
                    for k in ("repositories", "unscanned", "open_findings", "verified_findings", "contributors")
                }
            ),
            "infestations": {"type": "array", "items": _ref("Infestation")},
            "recent_reports": {
                "type": "array",
                "items": _obj(
                    {
                        "id": INTEGER,
                        "repository": STRING,
                        "host": STRING,
                        "commit_sha": SHA,
                        "provenance": PROVENANCE,
                        "model": _nullable("string"),
                        "visibility": STRING,
                        "findings_count": _nullable("integer", description="null for a summary-only report"),
                        "inserted_at": TIMESTAMP,
                    }
                ),
            },
        }
    ),
    "Search": _obj({"query": STRING, "items": {"type": "array", "items": _ref("PublicRepository")}}),
    "RepositoryRecord": _obj(
        {
            "repository": _ref("PublicRepository"),
            "reports": {
                "type": "array",
                "items": _obj(
                    {
                        "id": INTEGER,
                        "commit_sha": SHA,
                        "model": _nullable("string"),
                        "provenance": PROVENANCE,
                        "review_kind": STRING,
                        "review_status": STRING,
                        "visibility": STRING,
                        "inserted_at": TIMESTAMP,
                    },
                    # a summary-only report stops at the header
                    {
                        "findings_count": INTEGER,
                        "findings": {
                            "type": "array",
                            "items": _obj(
                                {
                                    "public_id": UUID,
                                    "title": STRING,
                                    "severity": _nullable("string"),
                                    "file_path": STRING,
                                    "line_start": _nullable("integer"),
                                    "line_end": _nullable("integer"),
                                    "status": _nullable("string"),
                                    "pattern_key": _nullable("string"),
                                    "url": STRING,
                                }
                            ),
                        },
                    },
                ),
            },
            # the infestation map plus this repository's share of it
            "infestations": {
                "type": "array",
                "items": _obj(
                    _INFESTATION
                    | {
                        "repository_instance_count": INTEGER,
                        "repository_open_count": INTEGER,
                        "repository_status": CANONICAL_STATUS,
                        "repository_occurrence_public_id": _nullable("string", format="uuid"),
                    }
                ),
            },
        }
    ),
    "FindingRecord": _obj(
        {
            "finding": _obj(
                {
                    "public_id": UUID,
                    "title": STRING,
                    "severity": SEVERITY,
                    "file_path": STRING,
                    "line_start": _nullable("integer"),
                    "line_end": _nullable("integer"),
                    "description": STRING,
                    "disposition": STRING,
                    "status": _nullable("string"),
                    "canonical_public_id": _nullable("string", format="uuid"),
                    "confirmations_count": _nullable("integer"),
                    "disputes_count": _nullable("integer"),
                    "pattern_key": _nullable("string"),
                    "commit_sha": SHA,
                    "reported_at": TIMESTAMP,
                    "repository": _obj({"host": STRING, "owner": STRING, "name": STRING}),
                }
            ),
            "checks": {
                "type": "array",
                "items": _obj(
                    {
                        "verdict": {"type": "string", "enum": list(CHECK_VERDICTS)},
                        "provenance": PROVENANCE,
                        "commit_sha": SHA,
                        "inserted_at": TIMESTAMP,
                    }
                ),
            },
        }
    ),
    # the change feed (app.feed, docs/domain.md §13): which ids each kind carries; a withdrawn finding or repository
    # keeps only kind, seq, at and its opaque ids in every entry (rendered at read time)
    "ChangeEntry": _obj(
        {
            "seq": {"type": "integer", "description": "increasing; commit order"},
            "at": {"type": "string", "description": "ISO 8601 date-time"},
            "kind": {"type": "string", "enum": list(KINDS)},
        },
        {
            "finding": {**UUID, "description": "occurrence public_id"},
            "canonical": {**UUID, "description": "canonical finding public_id"},
            "repository": {"type": "string", "description": "host/owner/name"},
            "repository_id": {**UUID, "description": "opaque repository id (not the serial id)"},
            "pattern_key": _nullable("string"),
            "status": {"type": "string", "enum": list(CANONICAL_STATUSES)},
            "reason": {"type": "string", "enum": list(REASONS)},
        },
    ),
    "ChangePage": _obj(
        {
            "entries": {"type": "array", "items": _ref("ChangeEntry")},
            "next_cursor": {"type": "string", "description": "always set: resume or poll from it"},
        }
    ),
    "Tombstone": _obj(
        {
            "finding": UUID,
            "withdrawn_at": {"type": "string", "description": "ISO 8601 date-time"},
            "reason": {"type": "string", "enum": list(REASONS)},
        }
    ),
    # the bulk export (app.exports): its manifest; the records of its files are docs/schemas/*.schema.json
    "ExportManifest": _obj(
        {
            "generated_at": {"type": "string", "description": "ISO 8601 date-time of the snapshot"},
            "changes_cursor": {"type": "string", "description": "follow /api/v1/changes from this cursor"},
            "files": {
                "type": "array",
                "items": _obj({"name": STRING, "records": INTEGER, "bytes": INTEGER, "sha256": {"type": "string"}}),
            },
        }
    ),
    # SARIF 2.1.0 in (app.reports.sarif, docs/sarif.md): the log, and what its mapping skipped or shortened
    "SarifLog": {
        "type": "object",
        "description": "A SARIF 2.1.0 log (Content-Type application/sarif+json): one report, mapped as docs/sarif.md "
        "says; errors name the JSON path in the log (`runs[0].results[12].locations[0]`)",
        "required": ["version", "runs"],
        "properties": {
            "version": {"const": "2.1.0"},
            "runs": {"type": "array", "minItems": 1, "items": {"type": "object"}},
        },
    },
    "SarifSummary": _obj(
        {
            "results": INTEGER,
            "findings": INTEGER,
            "skipped": _obj({k: INTEGER for k in ("suppressed", "absent", "not_a_problem", "no_location")}),
            "truncated": _obj({"titles": INTEGER, "descriptions": INTEGER}),
        }
    ),
}

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


def _post(summary: str, body: str, answers: dict[str, Schema], params: list[Schema], *, sarif: bool = False) -> Schema:
    content = {"application/json": {"schema": _ref(body)}}
    if sarif:
        content["application/sarif+json"] = {"schema": _ref("SarifLog")}
    return {
        "post": {
            "summary": summary,
            "security": [{"bearer": []}],
            "parameters": params,
            "requestBody": {"required": True, "content": content},
            "responses": answers | {code: _error(code) for code in _API_ERRORS},
        }
    }


def _get(summary: str, schema: str, params: list[Schema] | None = None) -> Schema:
    return {
        "get": {
            "summary": summary,
            "parameters": params or [],
            "responses": {"200": _json(_ref(schema), summary)} | {code: _error(code) for code in _TWIN_ERRORS},
        }
    }


def _gone(operation: Schema) -> Schema:
    """A record that answers 410 Gone once withdrawn (a tombstone: id, time, reason class)."""
    operation["get"]["responses"]["410"] = _json(_ref("Tombstone"), "Withdrawn: the tombstone, nothing else")
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


_KEY = _param("pattern_key", schema={"type": "string"}, description="64 lowercase hex characters")
_CURSOR = _param("cursor", "query", description="the `next_cursor` of the previous page")

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
            "RepositoryRegistration",
            {
                "201": _json(_ref("Repository"), "Registered"),
                "200": _json(_ref("Repository"), "Already registered"),
            },
            [],
        ),
        "/api/v1/repos/{host}/{owner}/{name}/reports": _post(
            "Submit a report (scope findings:submit or reviews:submit)",
            "ReportSubmission",
            {
                "201": _json(_ref("Report"), "Stored (a SARIF log's answer adds `sarif`: a SarifSummary)"),
                "200": _json(_ref("Report"), "A retry of a run already stored: the stored report"),
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
            "CheckSubmission",
            {"201": _json(_ref("Check"), "Recorded")},
            [_param("canonical_public_id", schema=UUID)],
        ),
        "/api/v1/reports/{scan_id}/confirmations": _post(
            "Record a report-level verdict (scope findings:verify or reviews:verify)",
            "ConfirmationSubmission",
            {"201": _json(_ref("Confirmation"), "Recorded")},
            [_param("scan_id", schema={"type": "string", "pattern": "^[0-9]+$"})],
        ),
        "/api/v1/openapi.json": {
            "get": {"summary": "This document", "responses": {"200": _json({"type": "object"}, "OpenAPI 3.1")}}
        },
        "/index.json": _get("The home page's twin: stats, infestations, recent reports", "Home"),
        "/infestations.json": _get(
            "The atlas: ranked infestations (filters are clamped, never refused)",
            "InfestationList",
            [
                _param("days", "query", None, "1..365, default 30"),
                _param("min_repos", "query", None, "default 2"),
                _param("status", "query", None, "one of " + ", ".join(STATUS_CHOICES)),
                _param("limit", "query", None, "default 50"),
            ],
        ),
        "/infestations/{pattern_key}.json": _get(
            "One infestation: counts, affected repositories, ledger",
            "InfestationShow",
            [_KEY, _CURSOR, _param("repos_cursor", "query")],
        ),
        "/infestations/{pattern_key}/instances.json": _get(
            "A page of an infestation's ledger", "InstancePage", [_KEY, _CURSOR]
        ),
        "/repos/{host}/{owner}/{name}.json": _get(
            "A repository's record: its reports and infestations", "RepositoryRecord", _REPO_PARAMS
        ),
        "/repos/{host}/{owner}/{name}/findings.sarif": _document_get(
            "A listed repository's public findings as one SARIF 2.1.0 log (docs/sarif.md)",
            {"application/sarif+json": {"schema": {"type": "object"}}},
            {"application/json": {"schema": _ref("Errors")}},
        ),
        "/repos/{host}/{owner}/{name}/badge.svg": _document_get(
            'A listed repository\'s badge: "tarakan | N open", "clean" or "not scanned"',
            {"image/svg+xml": {}},
            {"text/html": {}},
        ),
        "/findings/{ref}.json": _gone(
            _get("A finding's record and its checks", "FindingRecord", [_param("ref", schema=UUID)])
        ),
        "/api/v1/changes": _get(
            "The change feed, oldest first: what became public, changed status or was withdrawn (no token)",
            "ChangePage",
            [
                _CURSOR,
                _param(
                    "limit",
                    "query",
                    {"type": "string", "pattern": "^0*(?:[1-9][0-9]{0,2}|1000)$"},
                    "1..1000, default 100",
                ),
            ],
        ),
        "/search.json": _get(
            "Search repositories",
            "Search",
            [_param("q", "query"), _param("limit", "query")],
        ),
        "/exports/manifest.json": _export_get(
            "The newest bulk export's manifest (ETag)", {"application/json": {"schema": _ref("ExportManifest")}}
        ),
        **{
            f"/exports/{name}": _export_get(
                "A file of the newest bulk export: gzipped NDJSON, one record per line (docs/schemas/); ETag is its "
                "sha256, Range and If-Range supported",
                {"application/gzip": {}},
            )
            for name in ("repositories.ndjson.gz", "findings.ndjson.gz", "patterns.ndjson.gz")
        },
    },
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "an API token"}},
        "schemas": _SCHEMAS,
        "responses": {f"E{code}": _json(_ref("Errors"), text) for code, text in _ERROR_TEXT.items()},
    },
}


async def openapi_json(request: Request) -> Response:
    return JSONResponse(DOCUMENT, headers={"Cache-Control": "public, max-age=300"})


routes: list[BaseRoute] = [Route("/api/v1/openapi.json", openapi_json, methods=["GET", "HEAD"], name="openapi")]
