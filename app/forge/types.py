"""What the forge answers (docs/forge.md), the types of `app.forge.api`: each function there answers an `Answer`,
never raises for anything the forge or the network does."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Generic, Literal, TypeVar

T = TypeVar("T")

# found: the value; missing: the forge says there is no such thing (404/410, or 422 for a commit); not_modified: a
# conditional request's 304 (the caller's copy stands); refused: an answer that is nobody's outage (a redirect to
# another name, 401, a private repository); failed: the forge's or the network's fault, or no rate left in time
Outcome = Literal["found", "missing", "not_modified", "refused", "failed"]


@dataclass(frozen=True)
class Answer(Generic[T]):
    outcome: Outcome
    host: str
    value: T | None = None
    detail: str = ""  # a sentence for logs and errors: "github.com answered 503"
    status: int = 0  # the forge's HTTP status; 0 when it never answered
    etag: str | None = None
    redirect: str | None = None  # a repository lookup redirected: "owner/name" it now answers for


@dataclass(frozen=True)
class RepoInfo:
    forge_id: str
    full_name: str  # "owner/name" as the forge spells it
    default_branch: str
    description: str | None
    language: str | None
    stars: int
    private: bool
    archived: bool


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    committed_at: datetime | None


@dataclass(frozen=True)
class RawFile:
    data: bytes  # at most FORGE_MAX_FILE_BYTES
    truncated: bool  # the file is longer than what was read
