"""Building blocks of the OpenAPI document that `app/site/openapi.py` writes: references to answer types (which
become its components), parameters, operations and the error answers (docs/architecture.md "Answers")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.kernel.answers import Errors, openapi_components

Schema = dict[str, Any]
UUID: Schema = {"type": "string", "format": "uuid"}
TEXT_BODY: Schema = {"type": "string"}  # a text body (an SVG, HTML, plain text)
BINARY_BODY: Schema = {"type": "string", "format": "binary"}  # bytes (a gzip file)

_named: dict[str, type] = {}  # the types the paths name: they and every type they reach are the components


def ref(kind: type) -> Schema:
    _named[kind.__name__] = kind
    return {"$ref": f"#/components/schemas/{kind.__name__}"}


def components() -> Schema:
    """`components.schemas`: every type named so far, and every type they reach."""
    return openapi_components(_named.values())


ERROR_TEXT = {
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
API_ERRORS = ("400", "401", "403", "404", "409", "413", "422", "429", "503")
TWIN_ERRORS = ("400", "404", "413", "422", "503")
GET_ERRORS = ("400", "401", "403", "404", "503")  # a secured GET


def error(code: str) -> Schema:
    return {"$ref": f"#/components/responses/E{code}"}


def json_answer(schema: Schema, description: str) -> Schema:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def error_responses() -> Schema:
    """`components.responses`: `E400` ... `E503`, each an `Errors` body."""
    return {f"E{code}": json_answer(ref(Errors), text) for code, text in ERROR_TEXT.items()}


# what the edge lets through (app.kernel.limits.edge_refusal, app.kernel.text): a path segment with a control
# character is a 404, a query value with one (tab and line breaks aside) a 400
PATH_TEXT: Schema = {"type": "string", "pattern": "^[^\\x00-\\x1f\\x7f-\\x9f]*$"}
QUERY_TEXT: Schema = {"type": "string", "pattern": "^[^\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f-\\x9f]*$"}


def param(name: str, where: str = "path", schema: Schema | None = None, description: str = "") -> Schema:
    """A parameter; its schema defaults to the text the edge lets through (a route reads it further)."""
    default = PATH_TEXT if where == "path" else QUERY_TEXT
    found: Schema = {"name": name, "in": where, "required": where == "path", "schema": schema or default}
    if description:
        found["description"] = description
    return found


def post(
    operation_id: str,
    summary: str,
    body: type,
    answers: Schema,
    params: list[Schema],
    *,
    also: Mapping[str, type] | None = None,
    required: bool = True,
) -> Schema:
    """A POST of the API (bearer token): its body as JSON (and `also` other media types); `required=False` for
    one that takes no fields (no body, or `{}`). `operation_id` is the method name a generated client gets."""
    content = {"application/json": {"schema": ref(body)}} | {k: {"schema": ref(t)} for k, t in (also or {}).items()}
    return {
        "post": {
            "operationId": operation_id,
            "summary": summary,
            "security": [{"bearer": []}],
            "parameters": params,
            "requestBody": {"required": required, "content": content},
            "responses": answers | {code: error(code) for code in API_ERRORS},
        }
    }


def get(operation_id: str, summary: str, schema: type, params: list[Schema] | None = None) -> Schema:
    """A public GET (a JSON twin or the feed)."""
    return {
        "get": {
            "operationId": operation_id,
            "summary": summary,
            "parameters": params or [],
            "responses": {"200": json_answer(ref(schema), summary)} | {code: error(code) for code in TWIN_ERRORS},
        }
    }


def secured_get(operation_id: str, summary: str, schema: type, params: list[Schema]) -> Schema:
    """A GET of the API that needs a bearer token."""
    operation = get(operation_id, summary, schema, params)["get"]
    operation["security"] = [{"bearer": []}]
    operation["responses"] = {"200": operation["responses"]["200"]} | {code: error(code) for code in GET_ERRORS}
    return {"get": operation}


def delete(operation_id: str, summary: str, params: list[Schema]) -> Schema:
    """A DELETE that takes no body (if one is sent: empty or `{}`): 204."""
    return {
        "delete": {
            "operationId": operation_id,
            "summary": summary,
            "security": [{"bearer": []}],
            "parameters": params,
            "responses": {"204": {"description": "Deleted"}} | {code: error(code) for code in API_ERRORS},
        }
    }


def gone(operation: Schema, tombstone: type) -> Schema:
    """A record that answers 410 Gone once withdrawn (a tombstone: id, time, reason class)."""
    operation["get"]["responses"]["410"] = json_answer(ref(tombstone), "Withdrawn: the tombstone, nothing else")
    return operation


def export_get(operation_id: str, summary: str, content: Schema) -> Schema:
    """A bulk export document (app.exports.routes): 404 before the first export, 503 while the newest one is being
    rebuilt after a takedown (plain text for the files, like feeds)."""
    plain = {"text/plain": {"schema": TEXT_BODY}}
    unavailable = {"description": "Rebuilding after a takedown: see `Retry-After`", "content": plain}
    answers: Schema = {
        "200": {"description": summary, "content": content},
        "206": {"description": "The requested range", "content": content},
        "304": {"description": "Not modified (If-None-Match)"},
        "404": error("404"),
        "416": {"description": "Range not satisfiable", "content": plain},
        "503": error("503") if "application/json" in content else unavailable,
    }
    return {"get": {"operationId": operation_id, "summary": summary, "parameters": [], "responses": answers}}


def document_get(operation_id: str, summary: str, content: Schema, errors: Schema, params: list[Schema]) -> Schema:
    """A public document of a listed repository (app.site.sarif, app.site.badge): ETag, 404 when not listed."""
    answers: Schema = {
        "200": {"description": summary, "content": content},
        "304": {"description": "Not modified (If-None-Match)"},
        "404": {"description": "No listed repository at this address", "content": errors},
        "503": {"description": "Dependency outage: see `Retry-After`", "content": errors},
    }
    return {"get": {"operationId": operation_id, "summary": summary, "parameters": params, "responses": answers}}
