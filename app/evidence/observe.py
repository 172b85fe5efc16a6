"""Observations: is the code still there? Per listed repository, the default branch's head is asked once, each open
finding's file read there once, and the anchor of its newest publishable occurrence searched: `present` (the same
lines), `moved` (elsewhere in the file) or `absent` (`file_missing`, `lines_changed`). The canonical's ledger keeps
the last 20, newest first; a state change of a published finding is a `finding.observed` feed entry. Absence is
evidence, never a status (docs/domain.md "Observations"). Network outside transactions; one per repository."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypedDict

import msgspec
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.forge import api as forge
from app.forge import lines
from app.kernel import db
from app.kernel.errors import NotFound
from app.kernel.purge import purge_after_commit
from app.kernel.refs import parse_ref
from app.kernel.shared_cache import repository_tag
from app.kernel.sql import statement
from app.record.models import FINDING_OBSERVED
from app.record.observations import Observation, stored_entries
from app.record.outbox import ring_webhooks_after_commit
from app.record.public import has_public_occurrence, listed_repository, public_occurrence

log = logging.getLogger(__name__)

PRESENT, MOVED, ABSENT = "present", "moved", "absent"
FILE_MISSING, LINES_CHANGED = "file_missing", "lines_changed"
LEDGER_SIZE = 20
REPOSITORY_SECONDS = 30.0  # one repository's forge requests, waits for the shared rate included
DAILY_LIMIT = 100_000  # repositories per daily run (the forge rate bounds it first: docs/operations.md)

# Listed repositories with a finding not fixed that has a publishable occurrence, least recently observed first;
# the daily run skips those observed since `:day_start` (once a day), `--repo` names one.
_REPOSITORIES = statement(
    """
SELECT r.id, r.host, r.owner, r.name, r.default_branch FROM repositories r
WHERE {listed}
  AND (CAST(:repository_id AS bigint) IS NULL OR r.id = :repository_id)
  AND (CAST(:day_start AS timestamptz) IS NULL OR r.observed_at IS NULL OR r.observed_at < :day_start)
  AND EXISTS (SELECT 1 FROM canonical_findings c WHERE c.repository_id = r.id AND c.status <> 'fixed' AND {public})
ORDER BY r.observed_at NULLS FIRST, r.id
LIMIT :limit
""",
    listed=listed_repository(),
    public=has_public_occurrence(),
)

# Each finding not fixed, with its newest publishable occurrence (what its page shows) and its ledger's head.
_TARGETS = statement(
    """
SELECT c.id, c.observations -> 0 ->> 'commit' AS last_commit, o.commit_sha, o.file_path, o.line_start, o.line_end,
       o.anchor
FROM canonical_findings c
JOIN LATERAL (
  SELECT s.commit_sha, f.file_path, f.line_start, f.line_end, f.anchor
  FROM scan_findings f JOIN scans s ON s.id = f.scan_id JOIN repositories r ON r.id = s.repository_id
  WHERE f.canonical_finding_id = c.id AND {public}
  ORDER BY s.inserted_at DESC, f.id DESC LIMIT 1
) o ON TRUE
WHERE c.repository_id = :repository_id AND c.status <> 'fixed'
ORDER BY c.id
""",
    public=public_occurrence(),
)

_CACHED_FILE = text(
    "SELECT present, line_digests FROM forge_files WHERE repository_id = :repository_id AND commit_sha = :sha "
    "AND path = :path"
)
_CACHE_FILE = text(
    "INSERT INTO forge_files (repository_id, commit_sha, path, present, line_digests) "
    "VALUES (:repository_id, :sha, :path, :present, :digests) ON CONFLICT DO NOTHING"
)
_LOCK_REPOSITORY = text("SELECT 1 FROM repositories WHERE id = :repository_id FOR UPDATE")
_LEDGERS = text(
    "SELECT id, observations FROM canonical_findings WHERE id = ANY(CAST(:ids AS bigint[])) ORDER BY id FOR UPDATE"
)
_WRITE_LEDGER = text("UPDATE canonical_findings SET observations = CAST(:ledger AS jsonb) WHERE id = :id")
_OBSERVED_AT = text("UPDATE repositories SET observed_at = :now WHERE id = :repository_id")
# the feed's entry, for a canonical the feed announced (a published finding) only; numbered at commit
_ANNOUNCE = text(
    """
INSERT INTO changes (kind, canonical, repository_id, repository_key, status, reason, commit_sha)
SELECT :kind, c.public_id, c.repository_id, pr.opaque_id, :state, :reason, :commit
FROM canonical_findings c
JOIN published_canonicals pc ON pc.canonical_id = c.id
LEFT JOIN published_repositories pr ON pr.repository_id = c.repository_id
WHERE c.id = :id
"""
)
_BY_NAME = text(
    "SELECT id FROM repositories WHERE host = :host AND owner = :owner AND name = :name AND listing_status = 'listed'"
)


@dataclass(frozen=True)
class _Repository:
    id: int
    host: str
    owner: str
    name: str
    default_branch: str | None

    @property
    def slug(self) -> str:
        return f"{self.host}/{self.owner}/{self.name}"


@dataclass(frozen=True)
class _Target:
    canonical_id: int
    last_commit: str | None
    commit_sha: str  # the occurrence's commit
    file_path: str
    line_start: int | None
    line_end: int | None
    anchor: str | None


class RunSummary(TypedDict):
    """A run in figures (the job's result and its `job_runs` detail)."""

    repositories: int
    observed: int
    changed: int
    skipped: int
    left: int


class _CachedFile(TypedDict):
    """A forge_files row learnt during the run (the parameters of `_CACHE_FILE`)."""

    repository_id: int
    sha: str
    path: str
    present: bool
    digests: bytes | None


@dataclass
class RunResult:
    """What one run did: repositories visited, findings observed, feed entries (state changes) written."""

    repositories: int = 0
    observed: int = 0
    changed: int = 0
    skipped: list[str] = field(default_factory=list)  # "host/owner/name: why"
    left: int = 0  # not visited: their host failed earlier in the run, or no forge is asked for it

    def summary(self) -> RunSummary:
        return {
            "repositories": self.repositories,
            "observed": self.observed,
            "changed": self.changed,
            "skipped": len(self.skipped),
            "left": self.left,
        }


class _ForgeTrouble(Exception):
    """The forge failed, is rate-limited or too slow for this repository: nothing of it is written this run."""


class _Files:
    """Files at commits, read once per run: the forge_files cache first, then the raw file (cached when complete)."""

    def __init__(self, repository: _Repository, deadline: float) -> None:
        self.repository = repository
        self.deadline = deadline
        self.read: dict[tuple[str, str], bytes | None] = {}
        self.learnt: list[_CachedFile] = []  # cache rows, written in the repository's transaction

    async def digests(self, sha: str, path: str) -> bytes | None:
        """One digest per line of `path` at `sha`; None when the file is not there."""
        key = (sha, path)
        if key not in self.read:
            self.read[key] = await self._fetch(sha, path)
        return self.read[key]

    async def _fetch(self, sha: str, path: str) -> bytes | None:
        r = self.repository
        async with db.read_session(replica=False) as session:
            cached = (await session.execute(_CACHED_FILE, {"repository_id": r.id, "sha": sha, "path": path})).first()
        if cached is not None:
            return bytes(cached.line_digests or b"") if cached.present else None
        answer = await forge.raw_file(r.host, r.owner, r.name, sha, path, deadline=self.deadline)
        if answer.outcome == "missing":
            self.learnt.append(_CachedFile(repository_id=r.id, sha=sha, path=path, present=False, digests=None))
            return None
        if answer.outcome != "found" or answer.value is None:
            raise _ForgeTrouble(answer.detail or answer.outcome)
        digests = lines.line_digests(answer.value.data)
        if not answer.value.truncated:  # a file cut at FORGE_MAX_FILE_BYTES is searched, never cached
            self.learnt.append(_CachedFile(repository_id=r.id, sha=sha, path=path, present=True, digests=digests))
        return digests


def _nonblank(digests: bytes, line_start: int, line_end: int) -> int:
    size = lines.DIGEST
    chunk = digests[(line_start - 1) * size : line_end * size]
    return sum(1 for i in range(0, len(chunk), size) if chunk[i : i + size] != lines.BLANK)


def _entry(
    head: str, branch: str, at: datetime, state: str, span: tuple[int, int] | None, reason: str | None
) -> Observation:
    return Observation(
        commit=head,
        branch=branch,
        state=state,
        line_start=span[0] if span else None,
        line_end=span[1] if span else None,
        reason=reason,
        at=at.isoformat(),
    )


async def _observe(target: _Target, files: _Files, head: str, branch: str, at: datetime) -> Observation:
    """The finding's state at `head`: its occurrence's anchor searched in the file there."""
    now = await files.digests(head, target.file_path)
    if now is None:
        return _entry(head, branch, at, ABSENT, None, FILE_MISSING)
    ls, le = target.line_start, target.line_end
    if ls is None or le is None:  # no lines: the file is the evidence
        return _entry(head, branch, at, PRESENT, None, None)
    anchor = target.anchor
    if anchor is not None and lines.anchor(now, ls, le) == anchor:
        return _entry(head, branch, at, PRESENT, (ls, le), None)
    # the cited lines as they were (a row stored before the gate has no anchor: computed from its commit's file)
    then = await files.digests(target.commit_sha, target.file_path)
    if then is not None and anchor is None:
        anchor = lines.anchor(then, ls, le)
        if anchor is not None and lines.anchor(now, ls, le) == anchor:
            return _entry(head, branch, at, PRESENT, (ls, le), None)
    if anchor is None:  # nothing to search (all blank, or its file unknown at its commit): the file is there
        return _entry(head, branch, at, PRESENT, None, None)
    found = lines.find(now, anchor, _nonblank(then, ls, le)) if then is not None else None
    if found is not None:
        return _entry(head, branch, at, MOVED, found, None)
    return _entry(head, branch, at, ABSENT, None, LINES_CHANGED)


async def _head(repository: _Repository, deadline: float) -> tuple[str, str] | None:
    """(branch, head sha) of the default branch; None when the forge knows no such repository or branch."""
    r = repository
    branch = r.default_branch
    if branch is None:
        info = await forge.repository(r.host, r.owner, r.name, deadline=deadline)
        if info.outcome == "missing" or (info.outcome == "found" and info.value is None):
            return None
        if info.outcome != "found" or info.value is None:
            raise _ForgeTrouble(info.detail or info.outcome)
        branch = info.value.default_branch
    answer = await forge.commit(r.host, r.owner, r.name, branch, deadline=deadline)
    if answer.outcome == "missing":
        return None
    if answer.outcome != "found" or answer.value is None:
        raise _ForgeTrouble(answer.detail or answer.outcome)
    return branch, answer.value.sha


async def _write(
    session: AsyncSession,
    repository: _Repository,
    observed: dict[int, Observation],
    learnt: list[_CachedFile],
    now: datetime,
) -> tuple[int, int]:
    """The repository's one transaction: caches, ledgers (a head already recorded adds nothing), feed entries for
    published findings whose state changed, `observed_at`. Returns (ledgers written, entries written)."""
    await session.execute(_LOCK_REPOSITORY, {"repository_id": repository.id})
    for cached in learnt:
        await session.execute(_CACHE_FILE, cached)
    written = entries = 0
    if observed:
        ledgers = (await session.execute(_LEDGERS, {"ids": sorted(observed)})).all()
        for row in ledgers:
            # the stored entries are written back as they are (older ones may lack a key)
            ledger, entry = stored_entries(row.observations), observed[row.id]
            if ledger and ledger[0].get("commit") == entry.commit:
                continue
            before = ledger[0].get("state") if ledger else PRESENT  # the report said it is there
            new = [msgspec.to_builtins(entry), *ledger][:LEDGER_SIZE]
            await session.execute(_WRITE_LEDGER, {"id": row.id, "ledger": json.dumps(new)})
            written += 1
            if entry.state != before:
                params = {"kind": FINDING_OBSERVED, "id": row.id, "state": entry.state}
                result = await session.execute(_ANNOUNCE, {**params, "reason": entry.reason, "commit": entry.commit})
                entries += int(result.rowcount or 0)  # type: ignore[attr-defined]
    await session.execute(_OBSERVED_AT, {"repository_id": repository.id, "now": now})
    if entries:
        ring_webhooks_after_commit()
    if written:
        purge_after_commit({repository_tag(repository.id)})  # its pages and its findings' show the ledger
    return written, entries


async def observe_repository(repository: _Repository, result: RunResult, now: datetime) -> None:
    deadline = time.monotonic() + REPOSITORY_SECONDS
    head = await _head(repository, deadline)
    if head is None:
        result.skipped.append(f"{repository.slug}: the forge knows no such repository or default branch")
        async with db.transaction() as session:
            await session.execute(_OBSERVED_AT, {"repository_id": repository.id, "now": now})
        return
    branch, sha = head
    async with db.read_session(replica=False) as session:
        rows = (await session.execute(_TARGETS, {"repository_id": repository.id})).all()
    targets = [
        _Target(int(r.id), r.last_commit, r.commit_sha, r.file_path, r.line_start, r.line_end, r.anchor) for r in rows
    ]
    files = _Files(repository, deadline)
    observed: dict[int, Observation] = {}
    for target in targets:
        if target.last_commit == sha:  # the same head twice adds nothing (and costs no request)
            continue
        observed[target.canonical_id] = await _observe(target, files, sha, branch, now)
    async with db.transaction() as session:
        written, entries = await _write(session, repository, observed, files.learnt, now)
    result.repositories += 1
    result.observed += written
    result.changed += entries


async def repository_id(slug: str) -> int:
    """The listed repository `host/owner/name` (404 naming `repository` otherwise)."""
    host, owner, name = parse_ref(slug)
    async with db.read_session(replica=False) as session:
        found = (await session.execute(_BY_NAME, {"host": host, "owner": owner, "name": name})).scalar()
    if found is None:
        raise NotFound({"repository": ["no listed repository is recorded at this address"]})
    return int(found)


async def observe(*, repository: int | None = None, limit: int = 1000, now: datetime | None = None) -> RunResult:
    """One observation run. `repository` (an id) is observed whenever asked; without it, at most `limit`
    repositories not observed yet today (UTC), oldest first. A host whose forge fails is left for the next run."""
    now = now or datetime.now(UTC)
    day_start = None if repository is not None else now.replace(hour=0, minute=0, second=0, microsecond=0)
    params = {"repository_id": repository, "day_start": day_start, "limit": limit}
    async with db.read_session(replica=False) as session:
        rows = (await session.execute(_REPOSITORIES, params)).all()
    result, stopped = RunResult(), set[str]()
    for row in rows:
        target = _Repository(int(row.id), row.host, row.owner, row.name, row.default_branch)
        if target.host in stopped or not forge.evidence_enabled(target.host):
            result.left += 1
            continue
        try:
            await observe_repository(target, result, now)
        except _ForgeTrouble as exc:
            stopped.add(target.host)
            result.skipped.append(f"{target.slug}: {exc}")
            log.warning("observation of %s stopped: %s", target.slug, exc)
    return result
