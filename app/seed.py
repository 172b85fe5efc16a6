"""Demo data (docs/domain.md §10): accounts, listed repositories, the original's 20 infestation patterns through the
real report service, then a synchronous rollup drain. Safe beside a running worker and resumable after a crash."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import logging
import os
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, Required, TypedDict, TypeVar

import psycopg
from sqlalchemy import exists, func, select, text, update
from sqlalchemy.exc import DBAPIError

from app.accounts.models import Account
from app.accounts.service import create_account, get_account_by_email
from app.devforge import DEMO_FORGE_DIR, publish_repository
from app.kernel import db
from app.kernel.cli import command
from app.kernel.errors import ValidationError
from app.registry.models import Repository
from app.registry.service import register_repository
from app.reports.finding_memory import pattern_key
from app.reports.models import CanonicalFinding, Scan, ScanFinding
from app.seed_data import DEMO_ACCOUNTS, DEMO_ONE_OFFS, DEMO_PATTERNS, DEMO_REPOSITORIES, MODERATOR_EMAIL

log = logging.getLogger(__name__)
T = TypeVar("T")

DEMO_PASSWORD = "tarakan-demo-password"
SEED_MODEL = "seed-agent"
SEED_PROMPT_VERSION = "epidemic-demo/v2"

# Age buckets in days: 7d, 30d, 90d, 365d windows and the tail beyond a year. A pattern's first two instances
# share its bucket, so every window has patterns with at least two repositories (min_repos=2).
_AGE_BUCKETS = ((0, 6), (7, 29), (30, 89), (90, 364), (365, 400))


@dataclass(frozen=True)
class SeedReport:
    repository: Repository
    run_id: str
    body: dict[str, Any]
    status: str
    age_seed: str  # drives the deterministic timestamps
    bucket: int
    pattern_key: str | None


def _int_hash(value: str) -> int:
    return int(hashlib.sha256(value.encode()).hexdigest(), 16)


def _commit_sha(repository_id: int, i: int, title: str) -> str:
    return hashlib.sha256(f"seed-epi-v2-{repository_id}-{i}-{title}".encode()).hexdigest()[:40]


def _envelope(commit_sha: str, run_id: str, finding: dict[str, Any]) -> dict[str, Any]:
    return {
        "commit_sha": commit_sha,
        "provenance": "agent",
        "review_kind": "code_review",
        "model": SEED_MODEL,
        "prompt_version": SEED_PROMPT_VERSION,
        "run_id": run_id,
        "document": {"tarakan_scan_format": 1, "findings": [finding]},
    }


def pattern_reports(repositories: list[Repository]) -> list[SeedReport]:
    """One report per pattern instance, exactly as docs/domain.md §10: repositories round-robin from a deterministic
    offset sha256(title) mod len(repositories)."""
    reports: list[SeedReport] = []
    for p, (title, severity, statuses) in enumerate(DEMO_PATTERNS):
        title_hash = _int_hash(title)
        offset = title_hash % len(repositories)
        for i, status in enumerate(statuses):
            repo = repositories[(offset + i) % len(repositories)]
            sha = _commit_sha(repo.id, i, title)
            finding = {
                "file": f"lib/seed/epidemic_{title_hash % 10000}/mod_{i}.ex",
                "line_start": 10 + 3 * i,
                "line_end": 14 + 3 * i,
                "severity": severity,
                "title": title,
                "description": f"Demo epidemic seed: {title} observed in {repo.owner}/{repo.name}.",
            }
            bucket = p % len(_AGE_BUCKETS) if i < 2 else (p + i) % len(_AGE_BUCKETS)
            run_id = f"epi-seed-v2-{sha}"
            reports.append(
                SeedReport(repo, run_id, _envelope(sha, run_id, finding), status, run_id, bucket, pattern_key(title))
            )
    return reports


def one_off_reports(repositories: list[Repository]) -> list[SeedReport]:
    reports: list[SeedReport] = []
    for n, (index, path, line, severity, title, status) in enumerate(DEMO_ONE_OFFS):
        repo = repositories[index % len(repositories)]
        sha = _commit_sha(repo.id, n, title)
        finding = {
            "file": path,
            "line_start": line,
            "line_end": line + 2,
            "severity": severity,
            "title": title,
            "description": f"Demo finding: {title} in {repo.owner}/{repo.name}.",
        }
        run_id = f"seed-one-off-v2-{sha}"
        reports.append(
            SeedReport(repo, run_id, _envelope(sha, run_id, finding), status, run_id, n % len(_AGE_BUCKETS), None)
        )
    return reports


def seeded_times(report: SeedReport, now: datetime) -> tuple[datetime, datetime]:
    """(inserted_at, updated_at): updated_at inside the report's age bucket, inserted_at up to 20 days earlier
    but never beyond 400 days ago."""
    low, high = _AGE_BUCKETS[report.bucket]
    h = _int_hash("seed-age-v2-" + report.age_seed)
    oldest = now - timedelta(days=400)
    updated = max(now - timedelta(days=low + h % (high - low + 1), seconds=(h >> 16) % 86_400), oldest)
    inserted = max(updated - timedelta(days=(h >> 40) % 21), oldest)
    return inserted, updated


async def _demo_accounts() -> tuple[Account, int]:
    moderator: Account | None = None
    created = 0
    for email, handle, role, tier in DEMO_ACCOUNTS:
        account = await get_account_by_email(email)
        if account is None:
            # only the moderator logs in to the web; argon2 costs ~0.1-1 s per hash, paid before the first page
            password = DEMO_PASSWORD if email == MODERATOR_EMAIL else None
            account = await create_account(
                email, handle, platform_role=role, trust_tier=tier, state="active", password=password
            )
            created += 1
        if email == MODERATOR_EMAIL:
            moderator = account
    assert moderator is not None
    return moderator, created


def _forge_folder() -> Path | None:
    """The demo forge's folder (./run's, DEMO_FORGE_DIR): the seed puts its repositories and the files its findings
    cite there, so the evidence gate finds them; unset (tests, a real forge), it writes nothing."""
    folder = os.environ.get(DEMO_FORGE_DIR)
    return Path(folder) if folder else None


def _metadata(repository: Repository) -> dict[str, Any]:
    [(language, stars, description)] = [
        (lang, stars, text_) for owner, name, lang, stars, text_ in DEMO_REPOSITORIES
        if (owner, name) == (repository.owner, repository.name)
    ]  # fmt: skip
    return {"language": language, "stars": stars, "description": description}


def _cited_file(finding: dict[str, Any]) -> bytes:
    """A file holding the seeded finding's lines (none blank, so each has an anchor)."""
    start, end = finding["line_start"], finding["line_end"]
    lines = [f"# demo source, line {n}" for n in range(1, end + 6)]
    for n in range(start, end + 1):
        lines[n - 1] = f"    unsafe_step({n - start}, {finding['title']!r})"
    return ("\n".join(lines) + "\n").encode()


def _publish_to_forge(folder: Path, reports: list[SeedReport], anchor: datetime) -> None:
    """Each demo repository with its reports' commits (derived from its id: written at run time), oldest first."""
    for repository in {r.repository.id: r.repository for r in reports}.values():
        mine = [r for r in reports if r.repository.id == repository.id]
        commits = sorted((seeded_times(r, anchor)[0] - timedelta(hours=1), r.body["commit_sha"]) for r in mine)
        files = {f["file"]: _cited_file(f) for r in mine for f in r.body["document"]["findings"]}
        meta = _metadata(repository)
        publish_repository(folder, "github.com", repository.owner, repository.name, meta,
                           [(sha, at) for at, sha in commits], files)  # fmt: skip


async def _demo_repositories() -> list[Repository]:
    repositories: list[Repository] = []
    folder = _forge_folder()
    for owner, name, language, stars, description in DEMO_REPOSITORIES:
        if folder is not None and not (folder / "github.com" / owner / name / "repository.json").exists():
            meta = {"language": language, "stars": stars, "description": description}
            publish_repository(folder, "github.com", owner, name, meta)  # found at registration, no commit yet
        repo, created = await register_repository("github.com", owner, name, listing_status="listed")
        if created:  # forge metadata is not part of registration; the seed fills it in like a sync would
            async with db.transaction() as session:
                await session.execute(
                    update(Repository)
                    .where(Repository.id == repo.id)
                    .values(description=description, primary_language=language, stars_count=stars)
                )
        repositories.append(repo)
    return repositories


# A seed transaction that loses a deadlock to a concurrent one (the worker draining the keys the reports just marked
# settles its dirty rows in its own order) was rolled back whole: running it again is safe (docs/domain.md §10)
RETRIES = 5
_TRANSIENT = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)


async def _retrying(what: str, step: Callable[[], Awaitable[T]]) -> T:
    for attempt in range(1, RETRIES + 1):
        try:
            return await step()
        except DBAPIError as exc:
            if not isinstance(exc.orig, _TRANSIENT) or attempt == RETRIES:
                raise
            log.warning("demo seed: %s lost a deadlock to a concurrent transaction; retrying (%d)", what, attempt)
            await asyncio.sleep(0.05 * attempt)
    raise AssertionError("unreachable")


async def _existing_run_ids(account_id: int, run_ids: list[str]) -> set[str]:
    async with db.read_session(replica=False) as session:
        rows = await session.execute(
            select(Scan.run_id).where(Scan.submitted_by_id == account_id, Scan.run_id.in_(run_ids))
        )
        return {r for (r,) in rows if r is not None}


def _demo_names() -> list[str]:
    return [f"{owner}/{name}" for owner, name, *_ in DEMO_REPOSITORIES]


_DEMO_REPOSITORY = func.concat(Repository.owner, "/", Repository.name).in_(_demo_names())
_SEED_RUN = Scan.model == SEED_MODEL


async def _anchor() -> datetime:
    """The demo's "now": when its first repository was registered. Every seeded timestamp counts back from it, so a
    run resuming an interrupted one writes the dates the first run would have, and each report the seed has dated
    is older than it while one it has not is newer (`_undated`)."""
    async with db.read_session(replica=False) as session:
        anchor = (await session.execute(select(func.min(Repository.inserted_at)).where(_DEMO_REPOSITORY))).scalar()
    assert anchor is not None, "the demo repositories are registered first"
    return anchor


async def _undated(account_id: int, reports: list[SeedReport], anchor: datetime) -> list[tuple[SeedReport, uuid.UUID]]:
    """The seed's reports stored but not yet given their status and dates: a run that crashed, was killed or lost
    a deadlock between its reports and `_apply_statuses_and_times` left them so."""
    by_run = {r.run_id: r for r in reports}
    async with db.read_session(replica=False) as session:
        rows = await session.execute(
            select(Scan.run_id, CanonicalFinding.public_id)
            .join(ScanFinding, ScanFinding.scan_id == Scan.id)
            .join(CanonicalFinding, CanonicalFinding.id == ScanFinding.canonical_finding_id)
            .where(Scan.submitted_by_id == account_id, Scan.run_id.in_(by_run), Scan.inserted_at > anchor)
        )
        return [(by_run[run_id], public_id) for run_id, public_id in rows if run_id is not None]


async def _unfinished_demo() -> bool:
    """Only demo repositories, and no seed report yet or one not dated: an earlier seed stopped half way."""
    async with db.read_session(replica=False) as session:
        if (await session.execute(select(exists().where(~_DEMO_REPOSITORY)))).scalar():
            return False
        if not (await session.execute(select(exists().where(_SEED_RUN)))).scalar():
            return True
    anchor = await _anchor()
    async with db.read_session(replica=False) as session:
        return bool((await session.execute(select(exists().where(_SEED_RUN, Scan.inserted_at > anchor)))).scalar())


async def _apply_statuses_and_times(submitted: list[tuple[SeedReport, uuid.UUID]], now: datetime) -> None:
    """One transaction: direct status writes, timestamps spread back from `now`, dirty keys, repository metrics."""
    from app.record import changes
    from app.record.outbox import mark_dirty
    from app.registry.metrics import recalculate_repository_metrics

    async with db.transaction() as session:
        for report, canonical_public_id in submitted:
            inserted, updated = seeded_times(report, now)
            canonical_id = (
                await session.execute(
                    update(CanonicalFinding)
                    .where(CanonicalFinding.public_id == canonical_public_id)
                    .values(
                        status=report.status,
                        verified_at=updated if report.status in ("verified", "fixed") else None,
                        inserted_at=inserted,
                        updated_at=updated,
                    )
                    .returning(CanonicalFinding.id)
                )
            ).scalar_one()
            # the report that first saw it is as old as the canonical, so repository pages agree with the atlas
            await session.execute(
                text(
                    "UPDATE scans SET inserted_at = :at, updated_at = :at WHERE id IN "
                    "(SELECT scan_id FROM scan_findings WHERE canonical_finding_id = :cid)"
                ),
                {"at": inserted, "cid": canonical_id},
            )
            await session.execute(
                text("UPDATE scan_findings SET inserted_at = :at, updated_at = :at WHERE canonical_finding_id = :cid"),
                {"at": inserted, "cid": canonical_id},
            )
        await mark_dirty(session, [r.pattern_key for r, _ in submitted], "status")
        # statuses written with seeded timestamps: the change feed's per-transaction status diff keys on
        # `updated_at = now()`, so announce them with the whole (small) diff
        await changes.sync_all(session)
        for repository_id in sorted({r.repository.id for r, _ in submitted}):
            await recalculate_repository_metrics(session, repository_id)


class SeedSummary(TypedDict, total=False):
    """What a seed did (`skipped`, and then only `reason`); printed by `tarakan seed`."""

    skipped: Required[bool]
    reason: str
    accounts_created: int
    repositories: int
    reports_submitted: int
    reports_skipped: int
    reports_dated: int
    patterns: int
    rollups_refreshed: int
    moderator_email: str
    password: str


async def seed_demo(*, if_empty: bool) -> SeedSummary:
    """Load the demo registry. With `if_empty`, do nothing when any repository exists, unless they are the demo's own
    and an earlier seed stopped half way (it is finished then). Returns a summary."""
    from app.infestations.dirty_queue import drain_all
    from app.reports.service import submit_report

    if if_empty:
        async with db.read_session(replica=False) as session:
            populated = (await session.execute(select(exists().where(Repository.id.is_not(None))))).scalar()
        if populated and not await _unfinished_demo():
            return {"skipped": True, "reason": "the database already has repositories"}

    moderator, accounts_created = await _retrying("the accounts", _demo_accounts)
    repositories = await _retrying("the repositories", _demo_repositories)
    reports = pattern_reports(repositories) + one_off_reports(repositories)
    already = await _existing_run_ids(moderator.id, [r.run_id for r in reports])
    anchor = await _anchor()
    if (folder := _forge_folder()) is not None:
        _publish_to_forge(folder, reports, anchor)

    submitted = 0
    for report in reports:
        if report.run_id in already:
            continue
        repo = report.repository
        # a retry of the same run_id is answered with the stored report: submitting again is safe
        await _retrying("a report", partial(submit_report, moderator, repo.host, repo.owner, repo.name, report.body))
        submitted += 1

    undated = await _undated(moderator.id, reports, anchor)
    if undated:
        await _retrying("the statuses and dates", lambda: _apply_statuses_and_times(undated, anchor))
    refreshed = await _retrying("the rollup drain", drain_all)
    return {
        "skipped": False,
        "accounts_created": accounts_created,
        "repositories": len(repositories),
        "reports_submitted": submitted,
        "reports_skipped": len(already),
        "reports_dated": len(undated),
        "patterns": len(DEMO_PATTERNS),
        "rollups_refreshed": refreshed,
        "moderator_email": MODERATOR_EMAIL,
        "password": DEMO_PASSWORD,
    }


async def _seed(args: argparse.Namespace) -> int:
    if not args.demo:
        raise ValidationError({"demo": ["pass --demo (the demo data set is the only seed)"]})
    summary = await seed_demo(if_empty=args.if_empty)
    if summary.get("skipped"):
        print(f"seed: skipped ({summary['reason']})")
        return 0
    print(
        "seed: {repositories} repositories, {reports_submitted} reports submitted ({reports_skipped} already "
        "there; {reports_dated} given their status and dates), {patterns} patterns, {rollups_refreshed} rollup keys "
        "refreshed".format(**summary)
    )
    print(f"seed: moderator login {summary['moderator_email']} / {summary['password']}")
    return 0


def register(sub: Any) -> None:
    """Add `tarakan seed --demo` to the `tarakan` parser."""
    seed = command(sub, "seed", _seed, "load the demo data set (docs/domain.md §10)")
    seed.add_argument("--demo", action="store_true", help="the demo registry: accounts, repositories, patterns")
    seed.add_argument("--if-empty", action="store_true", help="do nothing when any repository exists")
