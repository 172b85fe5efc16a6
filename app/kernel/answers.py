"""Typed JSON answers: the msgspec Structs the serializers build, encoded as sent, and the OpenAPI components
generated from them (docs/architecture.md "Answers")."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Annotated, Any

import msgspec
from msgspec import UNSET as UNSET  # re-exported: the answer types' optional fields
from msgspec import Meta
from msgspec import UnsetType as UnsetType
from starlette.responses import Response


class Answer(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A closed JSON object: exactly its fields, in their order (`additionalProperties: false`); a field that
    defaults to UNSET is left out of the answer when not set."""


# Timestamps are sent as Python's `isoformat()` (`+00:00`, not msgspec's `Z`): build them with `iso()`.
Timestamp = Annotated[str, Meta(description="ISO 8601 date-time")]
Uuid = Annotated[str, Meta(extra_json_schema={"format": "uuid"})]
Sha = Annotated[str, Meta(pattern="^[0-9a-f]{40}$")]


def enum(values: Iterable[str], description: str | None = None) -> Meta:
    """`Annotated[str, enum(SEVERITIES)]`: a string out of a closed set its owner module defines (a value listed
    twice, as when two sets are joined, once: generators refuse a repeated value)."""
    return Meta(extra_json_schema={"enum": list(dict.fromkeys(values))}, description=description)


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def uuid_text(value: uuid.UUID | str | None) -> str | None:
    return None if value is None else str(value)


class Errors(Answer):
    """Every error answer (docs/security.md)."""

    errors: Annotated[
        dict[str, list[str]], Meta(description="field (or `request`, `path`, ...) -> messages naming the rule broken")
    ]


_encoder = msgspec.json.Encoder()


def columns(row: Mapping[Any, Any], names: str) -> dict[str, Any]:
    """The columns of a row named in `names` (space-separated), as read: the fields an answer copies unchanged,
    given as `Answer(**columns(row, "a b c"), d=...)` beside the fields it computes."""
    return {name: row[name] for name in names.split()}


def encode(value: msgspec.Struct) -> bytes:
    return _encoder.encode(value)


def as_json(value: Answer) -> dict[str, Any]:
    """The answer as the plain JSON values a client decodes (for the CLI and callers in Python)."""
    decoded: dict[str, Any] = msgspec.to_builtins(value)
    return decoded


def answer_response(
    value: msgspec.Struct, *, status_code: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(_encoder.encode(value), status_code=status_code, headers=headers, media_type="application/json")


_JSON_TYPES = ((bool, "boolean"), (int, "integer"), (str, "string"))


def _typed_values(schema: Any) -> None:
    """Every `enum` and `const` states its `type` (msgspec writes a `Literal` as a bare `enum`; generators need the
    type to emit working code)."""
    if isinstance(schema, list):
        for item in schema:
            _typed_values(item)
    elif isinstance(schema, dict):
        values = schema["enum"] if "enum" in schema else [schema["const"]] if "const" in schema else []
        if values and "type" not in schema:
            kinds = {next((name for kind, name in _JSON_TYPES if isinstance(value, kind)), None) for value in values}
            if len(kinds) == 1 and None not in kinds:
                schema["type"] = kinds.pop()
        for value in schema.values():
            _typed_values(value)


def openapi_components(types: Iterable[Any]) -> dict[str, Any]:
    """`components.schemas` of these types and every type they reach, named by class; a docstring is the
    description, on one line. A Struct's class attribute `EXAMPLES` becomes its schema's `examples`."""
    listed = list(types)
    _, schemas = msgspec.json.schema_components(listed, ref_template="#/components/schemas/{name}")
    for schema in schemas.values():
        if "description" in schema:
            schema["description"] = " ".join(schema["description"].split())
        _typed_values(schema)
    for kind in listed:
        if examples := getattr(kind, "EXAMPLES", None):
            schemas[kind.__name__]["examples"] = examples
    return schemas
