"""Source rows for tests that need data without going through the report service (accounts do go through the
account service: its validation is cheap and keeps test accounts realistic)."""

from __future__ import annotations

import hashlib
import itertools
from datetime import datetime
from typing import TypeVar

from app.accounts import service as accounts
from app.accounts.models import Account
from app.kernel import db
from app.registry.models import Repository
from app.reports.finding_memory import fingerprint, pattern_key
from app.reports.models import CanonicalFinding, Scan, ScanFinding

_seq = itertools.count(1)
_Row = TypeVar("_Row")


async def _stored(row: _Row, **timestamps: datetime | None) -> _Row:
    """Commit one new row on its own, as the service would have; given timestamps (`inserted_at=...`) replace
    the database's now()."""
    for column, at in timestamps.items():
        if at is not None:
            setattr(row, column, at)
    async with db.transaction() as session:
        session.add(row)
    return row


def sha(seed: object) -> str:
    return hashlib.sha1(str(seed).encode()).hexdigest()


async def create_account(
    *, email: str | None = None, handle: str | None = None, password: str | None = None, **attributes: str
) -> Account:
    """An account through the real account service, active unless `state` says otherwise; `attributes` are
    `platform_role`, `trust_tier` and `state`."""
    n = next(_seq)
    return await accounts.create_account(
        email or f"user{n}@example.com", handle or f"user{n}", password=password, **{"state": "active", **attributes}
    )


async def create_repository(
    owner: str | None = None, name: str | None = None, *, host: str = "github.com", listing_status: str = "listed"
) -> Repository:
    n = next(_seq)
    owner = owner or f"owner{n}"
    name = name or f"repo{n}"
    repo = Repository(
        host=host,
        owner=owner,
        name=name,
        canonical_url=f"https://{host}/{owner}/{name}",
        listing_status=listing_status,
    )
    return await _stored(repo)


async def create_scan(
    repository: Repository,
    account: Account,
    *,
    visibility: str = "public",
    commit_sha: str | None = None,
    inserted_at: datetime | None = None,
) -> Scan:
    scan = Scan(
        repository_id=repository.id,
        submitted_by_id=account.id,
        commit_sha=commit_sha or sha(next(_seq)),
        visibility=visibility,
        model="test-model",
        prompt_version="test/v1",
    )
    return await _stored(scan, inserted_at=inserted_at)


async def create_canonical(
    repository: Repository,
    title: str,
    *,
    status: str = "open",
    file_path: str | None = None,
    line_start: int | None = 1,
    severity: str = "high",
    commit_sha: str | None = None,
    inserted_at: datetime | None = None,
    updated_at: datetime | None = None,
) -> CanonicalFinding:
    path = file_path or f"src/file{next(_seq)}.py"
    sha_ = commit_sha or sha(next(_seq))
    canonical = CanonicalFinding(
        repository_id=repository.id,
        fingerprint=fingerprint(path, line_start, title),
        pattern_key=pattern_key(title),
        file_path=path,
        line_start=line_start,
        line_end=line_start,
        severity=severity,
        title=title,
        description=f"{title} description",
        status=status,
        first_seen_commit_sha=sha_,
        last_seen_commit_sha=sha_,
        detections_count=1,
    )
    return await _stored(canonical, inserted_at=inserted_at, updated_at=updated_at)


async def create_occurrence(scan: Scan, canonical: CanonicalFinding, *, position: int = 0) -> ScanFinding:
    finding = ScanFinding(
        scan_id=scan.id,
        position=position,
        file_path=canonical.file_path or "unknown",
        line_start=canonical.line_start,
        line_end=canonical.line_end,
        severity=canonical.severity or "high",
        title=canonical.title,
        description=canonical.description or "",
        canonical_finding_id=canonical.id,
        fingerprint=canonical.fingerprint,
        disposition="new",
    )
    return await _stored(finding)


async def create_instance(
    repository: Repository,
    account: Account,
    title: str,
    *,
    status: str = "open",
    visibility: str = "public",
    updated_at: datetime | None = None,
    inserted_at: datetime | None = None,
) -> tuple[Scan, CanonicalFinding, ScanFinding]:
    """One report with one finding whose canonical is new: the common shape of infestation fixtures."""
    scan = await create_scan(repository, account, visibility=visibility)
    canonical = await create_canonical(
        repository,
        title,
        status=status,
        commit_sha=scan.commit_sha,
        updated_at=updated_at,
        inserted_at=inserted_at,
    )
    occurrence = await create_occurrence(scan, canonical)
    return scan, canonical, occurrence
