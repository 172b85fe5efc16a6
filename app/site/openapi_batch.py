"""The batch route's part of the OpenAPI document (`POST /api/v1/reports/batch`): NDJSON in, NDJSON out, each line
described by its answer type (app.reports.batch)."""

from __future__ import annotations

import json

from app.kernel.openapi import API_ERRORS, BINARY_BODY, Schema, error, ref
from app.reports.batch import BATCH_MEDIA_TYPE, BATCH_SECONDS, MAX_BATCH_LINES
from app.reports.types import BatchLine, BatchReport


def _ndjson(line: type, description: str, example: str | None = None) -> Schema:
    """An NDJSON media type: UTF-8 text, one JSON object a line, described as the bytes it is (so generators hand
    it over as is); `x-itemSchema` (OpenAPI 3.2's `itemSchema`, an extension in 3.1) is the schema of each line."""
    media: Schema = {"schema": BINARY_BODY | {"description": description}, "x-itemSchema": ref(line)}
    if example is not None:
        media["example"] = example
    return {BATCH_MEDIA_TYPE: media}


_EXAMPLE = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in BatchReport.EXAMPLES)
BATCH = {
    "post": {
        "operationId": "submitReportBatch",
        "summary": f"Submit up to {MAX_BATCH_LINES} reports at once (scope findings:submit or reviews:submit): one "
        "report a line, each stored in its own transaction with the single route's validation, secrets scan, "
        'limits and quotas; answered 200 with one line per request line, in order (docs/domain.md §9 "Batches")',
        "security": [{"bearer": []}],
        "parameters": [],
        "requestBody": {
            "required": True,
            "content": _ndjson(
                BatchReport,
                f"NDJSON: one BatchReport (a report body and its `repository`) a line, at most {MAX_BATCH_LINES} "
                "lines and the API body limit; a blank line or one that is not a JSON object gets its own error line",
                _EXAMPLE,
            ),
        },
        "responses": {
            "200": {
                "description": "One BatchLine per request line, in order: 201 or 200 with `report`, else `errors` "
                f"(a 429 line was not tried: the request's processing budget, its time ({BATCH_SECONDS:g} s from its "
                "arrival), the account's limits or the refused-attempt allowance; send it again after `retry_after` "
                "seconds). Refused lines count toward the refused-attempt allowance",
                "content": _ndjson(BatchLine, "NDJSON: one BatchLine a line"),
            }
        }
        | {code: error(code) for code in API_ERRORS},
    }
}
