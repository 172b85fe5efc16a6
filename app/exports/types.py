"""The bulk export's manifest (`manifest.json`) as a typed structure; the records of its files are
docs/schemas/*.schema.json."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from app.kernel.answers import Answer


class ExportFile(Answer):
    name: str
    records: int
    bytes: int
    sha256: str


class ExportManifest(Answer):
    generated_at: Annotated[str, Meta(description="ISO 8601 date-time of the snapshot")]
    changes_cursor: Annotated[str, Meta(description="follow /api/v1/changes from this cursor")]
    files: list[ExportFile]
