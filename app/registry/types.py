"""Repositories as the API and the JSON twins show them: the registration answer, the public record every twin
shows, the search twin; and the registration body (parsed by `app.registry.validation`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

from msgspec import Meta, Struct

from app.kernel.answers import Answer, Timestamp, columns, iso
from app.kernel.urls import repo_path

METADATA_WORDS = (
    "the forge's record: found (looked up), pending (the forge failed; the worker looks it up again) or unchecked "
    "(never asked: the evidence check is off for this host, or it was registered before it existed)"
)


class Repository(Answer):
    id: int
    host: str
    owner: str
    name: str
    canonical_url: str
    listing_status: str
    status: str
    scan_count: int
    open_findings_count: int
    verified_findings_count: int
    url: str
    default_branch: str | None
    description: str | None
    primary_language: str | None
    stars_count: int
    metadata: Annotated[str, Meta(description=METADATA_WORDS)]


class PublicRepository(Answer):
    host: str
    owner: str
    name: str
    canonical_url: str
    status: str
    scan_count: int
    open_findings_count: int
    verified_findings_count: int
    last_scanned_at: Timestamp | None
    description: str | None
    primary_language: str | None
    stars_count: int | None
    forks_count: int | None
    archived: bool | None
    participation_mode: str | None
    listing_status: str
    url: Annotated[str, Meta(description="the page's path")]
    default_branch: str | None
    metadata: Annotated[str, Meta(description=METADATA_WORDS)]


def public_repository(row: Mapping[str, Any]) -> PublicRepository:
    """What a JSON twin says about a repository: its public fields and its page's path."""
    return PublicRepository(
        **columns(
            row,
            "host owner name canonical_url status scan_count open_findings_count verified_findings_count description"
            " primary_language stars_count forks_count archived participation_mode listing_status default_branch",
        ),
        last_scanned_at=iso(row["last_scanned_at"]),
        url=repo_path(row["host"], row["owner"], row["name"]),
        metadata=row["metadata_state"],
    )


class Search(Answer):
    query: str
    items: list[PublicRepository]


class RepositoryRegistration(Struct, kw_only=True):
    EXAMPLES: ClassVar[list[dict[str, Any]]] = [{"host": "github.com", "owner": "acme", "name": "widget"}]

    host: str
    owner: str
    name: str
