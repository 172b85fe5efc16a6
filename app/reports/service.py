"""Reports, checks and report-level confirmations: the only writers of scans, occurrences, canonical findings and
checks (domain §1.2-§1.5, §1.7, §2.6, §9). Each public function is ONE transaction: validate, write, assimilate,
recompute quorum and repository metrics, mark the touched infestation keys dirty, and only after the commit ring
the rollup worker."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import insert, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.accounts.models import Account
from app.infestations.hooks import mark_dirty, mark_repository_dirty, mark_scan_dirty, schedule_refresh_after_commit
from app.kernel import db
from app.kernel.errors import Forbidden, NotFound, RateLimited, ValidationError
from app.ops.secrets import client_ip_hash
from app.registry.stats import invalidate_registry_stats
from app.reports.assimilation import assimilate_scan
from app.reports.models import CanonicalFindingCheck, Scan, ScanConfirmation, ScanFinding
from app.reports.quorum import recompute_canonical_status, recompute_scan_verification, recompute_scans_at_commit
from app.reports.secrets_scanner import scan_fields
from app.reports.serializers import check_response, confirmation_response, report_response
from app.reports.validation import validate_check, validate_confirmation, validate_report

SUBMIT_SCOPES = frozenset({"findings:submit", "reviews:submit"})
VERIFY_SCOPES = frozenset({"findings:verify", "reviews:verify"})
MODERATOR_ROLES = ("moderator", "admin")
ACTING_STATES = ("probation", "active")
HOST_ALIASES = {"github": "github.com", "tarakan": "tarakan.lol"}

# §9 limits (moderators/admins exempt)
PER_MINUTE_LIMIT = 10
PER_REPOSITORY_MINUTE_LIMIT = 5
DAILY_QUOTA_REVIEWER = 100
DAILY_QUOTA_ACTIVE = 30
DAILY_QUOTA_OTHER = 3


@dataclass(frozen=True)
class Actor:
    """The acting account as the transaction sees it (fresh role/state, not the caller's copy)."""

    id: int
    handle: str
    platform_role: str
    trust_tier: str
    state: str

    @property
    def is_moderator(self) -> bool:
        return self.platform_role in MODERATOR_ROLES

    @property
    def is_qualified_reviewer(self) -> bool:
        return self.trust_tier == "reviewer" or self.is_moderator


@dataclass(frozen=True)
class RepositoryRow:
    id: int
    host: str
    owner: str
    name: str
    listing_status: str
    participation_mode: str
    submitted_by_id: int | None


# --- shared helpers --------------------------------------------------------------------------------------


def _require_scope(scopes: frozenset[str] | None, needed: frozenset[str]) -> None:
    # scopes=None: a trusted caller (CLI, seed) acting as the account itself
    if scopes is not None and not scopes & needed:
        raise Forbidden({"token": [f"needs one of the scopes {', '.join(sorted(needed))}"]})


async def _actor(session: AsyncSession, account_id: int, *, lock: bool) -> Actor:
    row = (
        await session.execute(
            text(
                "SELECT id, handle, platform_role, trust_tier, state FROM accounts WHERE id = :id"
                + (" FOR UPDATE" if lock else "")
            ),
            {"id": account_id},
        )
    ).first()
    if row is None:
        raise Forbidden({"account": ["does not exist"]})
    return Actor(int(row[0]), str(row[1]), str(row[2]), str(row[3]), str(row[4]))


def _require_acting_state(actor: Actor) -> None:
    if actor.state not in ACTING_STATES:
        raise Forbidden({"account": [f"is {actor.state} and cannot act"]})


_REPOSITORY_COLUMNS = "id, host, owner, name, listing_status, participation_mode, submitted_by_id"


def _repository(row: Any) -> RepositoryRow:
    return RepositoryRow(
        int(row[0]), str(row[1]), str(row[2]), str(row[3]), str(row[4]), str(row[5]), row[6] and int(row[6])
    )


async def _repository_by_name(session: AsyncSession, host: str, owner: str, name: str) -> RepositoryRow | None:
    host_ = host.strip().lower()
    row = (
        await session.execute(
            text(
                f"SELECT {_REPOSITORY_COLUMNS} FROM repositories "
                "WHERE host = :host AND owner = :owner AND name = :name FOR UPDATE"
            ),
            {"host": HOST_ALIASES.get(host_, host_), "owner": owner.strip().lower(), "name": name.strip().lower()},
        )
    ).first()
    return None if row is None else _repository(row)


async def _repository_by_id(session: AsyncSession, repository_id: int) -> RepositoryRow:
    row = (
        await session.execute(
            text(f"SELECT {_REPOSITORY_COLUMNS} FROM repositories WHERE id = :id FOR UPDATE"), {"id": repository_id}
        )
    ).one()
    return _repository(row)


def _require_visible(actor: Actor, repo: RepositoryRow | None) -> RepositoryRow:
    # a quarantined record is hidden from everyone but its submitter and moderators: same answer as unregistered
    if repo is None or (
        repo.listing_status == "quarantined" and not (actor.is_moderator or repo.submitted_by_id == actor.id)
    ):
        raise NotFound({"repository": ["is not registered"]})
    return repo


def _require_not_paused(actor: Actor, repo: RepositoryRow) -> None:
    if repo.participation_mode == "paused" and not actor.is_moderator:
        raise Forbidden({"repository": ["is paused: submissions and checks are closed"]})


def _require_verifier(actor: Actor) -> None:
    """§1.5 `verify_review` policy (repository memberships do not exist in this schema)."""
    _require_acting_state(actor)
    if not actor.is_qualified_reviewer:
        raise Forbidden({"account": ["must be a reviewer or a moderator to record checks"]})


async def _enforce_limits(session: AsyncSession, actor: Actor, repository_id: int) -> None:
    """§9 limits counted from stored reports (rolling minute and day; the account row is locked by the caller,
    so concurrent submissions by one account are counted one after another)."""
    if actor.is_moderator:
        return
    row = (
        await session.execute(
            text(
                "SELECT count(*) FILTER (WHERE inserted_at > now() - interval '1 minute'),"
                " count(*) FILTER (WHERE inserted_at > now() - interval '1 minute' AND repository_id = :rid),"
                " count(*) FROM scans WHERE submitted_by_id = :aid AND inserted_at > now() - interval '1 day'"
            ),
            {"aid": actor.id, "rid": repository_id},
        )
    ).one()
    per_minute, per_repo_minute, per_day = int(row[0]), int(row[1]), int(row[2])
    if actor.trust_tier == "reviewer":
        quota = DAILY_QUOTA_REVIEWER
    elif actor.state == "active":
        quota = DAILY_QUOTA_ACTIVE
    else:
        quota = DAILY_QUOTA_OTHER
    if per_day >= quota:
        raise RateLimited({"rate_limit": [f"daily quota of {quota} reports reached"]}, retry_after=86400)
    if per_minute >= PER_MINUTE_LIMIT:
        raise RateLimited(
            {"rate_limit": [f"at most {PER_MINUTE_LIMIT} reports per minute per account"]}, retry_after=60
        )
    if per_repo_minute >= PER_REPOSITORY_MINUTE_LIMIT:
        raise RateLimited(
            {"rate_limit": [f"at most {PER_REPOSITORY_MINUTE_LIMIT} reports per minute per repository"]},
            retry_after=60,
        )


async def _insert_once(session: AsyncSession, row: object, unique_index: str, taken: dict[str, list[str]]) -> None:
    """Insert a row guarded by a unique index; losing the race (or repeating oneself) is a 422, not a 500."""
    try:
        async with session.begin_nested():
            session.add(row)
            await session.flush()
    except IntegrityError as exc:
        if _is_unique_violation(exc, unique_index):
            raise ValidationError(taken) from None
        raise


def _is_unique_violation(exc: IntegrityError, index: str) -> bool:
    return index in str(exc.orig)


# --- reports ---------------------------------------------------------------------------------------------

RUN_ID_TAKEN = {"run_id": ["this agent run was already submitted"]}


async def submit_report(
    account: Account,
    host: str,
    owner: str,
    name: str,
    body: dict[str, Any],
    *,
    client_ip: str | None = None,
    scopes: frozenset[str] | None = None,
) -> dict[str, Any]:
    """Validate and store one report, assimilate its findings, recalculate the repository's metrics and mark its
    infestation keys dirty, all in one transaction. Returns the 201 body."""
    _require_scope(scopes, SUBMIT_SCOPES)
    async with db.transaction() as session:
        actor = await _actor(session, account.id, lock=True)
        _require_acting_state(actor)
        repo = _require_visible(actor, await _repository_by_name(session, host, owner, name))
        _require_not_paused(actor, repo)
        report = validate_report(body)
        scan_fields({"notes": report.notes, "document": report.document})
        if report.run_id is not None:
            taken = await session.execute(
                text("SELECT 1 FROM scans WHERE submitted_by_id = :aid AND run_id = :run_id"),
                {"aid": actor.id, "run_id": report.run_id},
            )
            if taken.first() is not None:
                raise ValidationError(RUN_ID_TAKEN)
        await _enforce_limits(session, actor, repo.id)
        scan = Scan(
            repository_id=repo.id,
            submitted_by_id=actor.id,
            commit_sha=report.commit_sha,
            model=report.model,
            prompt_version=report.prompt_version,
            run_id=report.run_id,
            provenance=report.provenance,
            review_kind=report.review_kind,
            notes=report.notes,
            findings_count=len(report.findings),
            review_status="quarantined",
            visibility="public",
            raw_document=report.raw_document,
        )
        try:
            async with session.begin_nested():
                session.add(scan)
                await session.flush()
        except IntegrityError as exc:  # the same run_id committed by a concurrent request
            if _is_unique_violation(exc, "scans_submitter_run_id_idx"):
                raise ValidationError(RUN_ID_TAKEN) from None
            raise
        if report.findings:
            await session.execute(
                insert(ScanFinding),
                [
                    {
                        "scan_id": scan.id,
                        "position": f.position,
                        "file_path": f.file_path,
                        "line_start": f.line_start,
                        "line_end": f.line_end,
                        "severity": f.severity,
                        "title": f.title,
                        "description": f.description,
                        "disposition": f.disposition,
                        "claimed_canonical_public_id": f.claimed_canonical_public_id,
                    }
                    for f in report.findings
                ],
            )
        await assimilate_scan(session, scan)
        await recompute_scan_verification(session, scan.id)
        await recalculate_repository_metrics(session, repo.id)
        await mark_scan_dirty(session, scan.id, "assimilate")
        response = await report_response(session, scan.id)
    await schedule_refresh_after_commit()
    invalidate_registry_stats()  # counts, contributors and metrics moved
    return response


# --- checks ----------------------------------------------------------------------------------------------

CHECK_TAKEN = {"commit_sha": ["you already checked this finding at this commit"]}


async def record_check(
    account: Account,
    canonical_public_id: str,
    body: dict[str, Any],
    *,
    client_ip: str | None = None,
    scopes: frozenset[str] | None = None,
) -> dict[str, Any]:
    """A verdict on a canonical finding at a commit (§1.5), then its quorum, the affected reports' verification
    and the repository metrics, in one transaction."""
    _require_scope(scopes, VERIFY_SCOPES)
    try:
        public_id = uuid.UUID(str(canonical_public_id))
    except ValueError:
        raise NotFound({"finding": ["not found"]}) from None
    ip_hash = await client_ip_hash(client_ip)
    async with db.transaction() as session:
        actor = await _actor(session, account.id, lock=False)
        found = (
            await session.execute(
                text("SELECT id, repository_id FROM canonical_findings WHERE public_id = :pid"), {"pid": public_id}
            )
        ).first()
        if found is None:
            raise NotFound({"finding": ["not found"]})
        canonical_id, repository_id = int(found[0]), int(found[1])
        try:
            repo = _require_visible(actor, await _repository_by_id(session, repository_id))
        except NotFound:
            raise NotFound({"finding": ["not found"]}) from None
        _require_verifier(actor)
        _require_not_paused(actor, repo)
        check = validate_check(body)
        scan_fields({"notes": check.notes, "evidence": check.evidence})
        assert check.commit_sha is not None
        # serialize checks on one canonical so each quorum recompute sees the others
        await session.execute(text("SELECT 1 FROM canonical_findings WHERE id = :id FOR UPDATE"), {"id": canonical_id})
        occurrence = (
            await session.execute(
                text(
                    "SELECT f.id FROM scan_findings f JOIN scans s ON s.id = f.scan_id "
                    "WHERE f.canonical_finding_id = :cid AND s.commit_sha = :sha AND s.visibility = 'public' "
                    "ORDER BY s.inserted_at DESC, f.id DESC LIMIT 1"
                ),
                {"cid": canonical_id, "sha": check.commit_sha},
            )
        ).scalar_one_or_none()
        if occurrence is None:
            raise ValidationError({"commit_sha": ["not found: this finding has no public occurrence at this commit"]})
        authored = await session.execute(
            text(
                "SELECT 1 FROM scan_findings f JOIN scans s ON s.id = f.scan_id "
                "WHERE f.canonical_finding_id = :cid AND s.commit_sha = :sha AND s.submitted_by_id = :aid LIMIT 1"
            ),
            {"cid": canonical_id, "sha": check.commit_sha, "aid": actor.id},
        )
        if authored.first() is not None:
            raise Forbidden({"account": ["conflict of interest: you reported this finding at this commit"]})
        row = CanonicalFindingCheck(
            canonical_finding_id=canonical_id,
            scan_finding_id=int(occurrence),
            account_id=actor.id,
            commit_sha=check.commit_sha,
            verdict=check.verdict,
            provenance=check.provenance,
            notes=check.notes,
            evidence=check.evidence,
            client_ip_hash=ip_hash,
        )
        await _insert_once(session, row, "canonical_finding_checks_unique_idx", CHECK_TAKEN)
        await recompute_canonical_status(session, canonical_id)
        await recompute_scans_at_commit(session, canonical_id, check.commit_sha)
        await recalculate_repository_metrics(session, repository_id)
        key = (
            await session.execute(
                text("SELECT pattern_key FROM canonical_findings WHERE id = :id"), {"id": canonical_id}
            )
        ).scalar_one()
        await mark_dirty(session, [key], "status")
        response = await check_response(session, row.id)
    await schedule_refresh_after_commit()
    invalidate_registry_stats()  # counts, contributors and metrics moved
    return response


CONFIRMATION_TAKEN = {"scan": ["you already recorded a verdict on this report"]}

# Copy a report-level verdict onto a check for every canonical of the report at its commit (insert-or-ignore),
# skipping canonicals the confirmer reported at that commit themselves (conflict of interest).
_COPY_TO_CHECKS = """
INSERT INTO canonical_finding_checks
  (canonical_finding_id, scan_finding_id, account_id, commit_sha, verdict, provenance, notes, evidence, client_ip_hash)
SELECT DISTINCT ON (f.canonical_finding_id) f.canonical_finding_id, f.id, :aid, s.commit_sha, :verdict,
       :provenance, :notes, :evidence, :ip
FROM scan_findings f JOIN scans s ON s.id = f.scan_id
WHERE f.scan_id = :scan_id AND f.canonical_finding_id IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM scan_findings o JOIN scans os ON os.id = o.scan_id
                  WHERE o.canonical_finding_id = f.canonical_finding_id AND os.commit_sha = s.commit_sha
                    AND os.submitted_by_id = :aid)
ORDER BY f.canonical_finding_id, f.position
ON CONFLICT (canonical_finding_id, account_id, commit_sha) DO NOTHING
RETURNING canonical_finding_id
"""


async def record_confirmation(
    account: Account,
    scan_id: int,
    body: dict[str, Any],
    *,
    client_ip: str | None = None,
    scopes: frozenset[str] | None = None,
) -> dict[str, Any]:
    """A report-level verdict (confirmed/disputed), copied onto checks of the report's canonicals at its commit."""
    _require_scope(scopes, VERIFY_SCOPES)
    ip_hash = await client_ip_hash(client_ip)
    async with db.transaction() as session:
        actor = await _actor(session, account.id, lock=False)
        found = (
            await session.execute(
                text("SELECT repository_id, submitted_by_id, visibility FROM scans WHERE id = :id"), {"id": scan_id}
            )
        ).first()
        privileged = actor.is_moderator or actor.trust_tier == "reviewer"
        if found is None or (found[2] == "restricted" and not privileged and found[1] != actor.id):
            raise NotFound({"report": ["not found"]})
        repository_id, submitter_id, visibility = int(found[0]), int(found[1]), str(found[2])
        try:
            repo = _require_visible(actor, await _repository_by_id(session, repository_id))
        except NotFound:
            raise NotFound({"report": ["not found"]}) from None
        _require_verifier(actor)
        _require_not_paused(actor, repo)
        if submitter_id == actor.id:
            raise Forbidden({"account": ["conflict of interest: you submitted this report"]})
        verdict = validate_confirmation(body)
        scan_fields({"notes": verdict.notes, "evidence": verdict.evidence})
        await session.execute(text("SELECT 1 FROM scans WHERE id = :id FOR UPDATE"), {"id": scan_id})
        confirmation = ScanConfirmation(
            scan_id=scan_id,
            account_id=actor.id,
            verdict=verdict.verdict,
            provenance=verdict.provenance,
            notes=verdict.notes,
            evidence=verdict.evidence,
            client_ip_hash=ip_hash,
        )
        await _insert_once(session, confirmation, "scan_confirmations_unique_idx", CONFIRMATION_TAKEN)
        copied: list[int] = []
        # checks need a public occurrence at the commit, so only a public report's verdict reaches canonicals
        if visibility == "public":
            copied = [
                int(c)
                for c in (
                    await session.execute(
                        text(_COPY_TO_CHECKS),
                        {
                            "aid": actor.id,
                            "verdict": verdict.verdict,
                            "provenance": verdict.provenance,
                            "notes": verdict.notes,
                            "evidence": verdict.evidence,
                            "ip": ip_hash,
                            "scan_id": scan_id,
                        },
                    )
                ).scalars()
            ]
        commit_sha = (
            await session.execute(text("SELECT commit_sha FROM scans WHERE id = :id"), {"id": scan_id})
        ).scalar_one()
        for canonical_id in sorted(copied):
            await recompute_canonical_status(session, canonical_id)
            # other reports of the same finding at the same commit gain the same checks
            await recompute_scans_at_commit(session, canonical_id, str(commit_sha))
        await recompute_scan_verification(session, scan_id)  # its own tallies, and reports without findings
        await recalculate_repository_metrics(session, repository_id)
        await mark_scan_dirty(session, scan_id, "status")
        response = await confirmation_response(session, confirmation.id, checks_recorded=len(copied))
    await schedule_refresh_after_commit()
    invalidate_registry_stats()  # counts, contributors and metrics moved
    return response


# --- repository metrics and authority revalidation -------------------------------------------------------

_RECALCULATE = """
WITH visible AS (
  SELECT id, inserted_at FROM scans
  WHERE repository_id = :id AND visibility IN ('public', 'public_summary')
), scan_stats AS (
  SELECT count(*) AS scans, max(inserted_at) AS last_scanned FROM visible
), canonical_stats AS (
  SELECT count(*) FILTER (WHERE c.status <> 'fixed') AS open, count(*) FILTER (WHERE c.status = 'verified') AS verified
  FROM canonical_findings c
  WHERE c.repository_id = :id
    AND EXISTS (SELECT 1 FROM scan_findings f JOIN visible v ON v.id = f.scan_id WHERE f.canonical_finding_id = c.id)
), target AS (
  SELECT scans, last_scanned, open, verified,
         CASE WHEN scans = 0 THEN 'unscanned' WHEN open > 0 THEN 'findings' ELSE 'reviewed' END AS status
  FROM scan_stats, canonical_stats
)
UPDATE repositories r SET
  scan_count = t.scans, last_scanned_at = t.last_scanned, open_findings_count = t.open,
  verified_findings_count = t.verified, status = t.status,
  listing_status = CASE WHEN r.listing_status = 'pending' AND t.scans > 0 THEN 'listed' ELSE r.listing_status END,
  updated_at = now()
FROM target t
WHERE r.id = :id
  AND (r.scan_count, r.last_scanned_at, r.open_findings_count, r.verified_findings_count, r.status,
       r.listing_status)
      IS DISTINCT FROM (t.scans, t.last_scanned, t.open, t.verified, t.status,
                        CASE WHEN r.listing_status = 'pending' AND t.scans > 0 THEN 'listed' ELSE r.listing_status END)
RETURNING r.listing_status
"""


async def recalculate_repository_metrics(session: AsyncSession, repository_id: int) -> tuple[str, str]:
    """§1.7 over public and public_summary reports: scan_count, last_scanned_at, open/verified counts, status, and
    the pending → listed promotion. Returns (listing before, listing after); a changed listing marks the
    repository's keys dirty (delist-safe) in this same transaction."""
    before = (
        await session.execute(
            text("SELECT listing_status FROM repositories WHERE id = :id FOR UPDATE"), {"id": repository_id}
        )
    ).scalar_one()
    after = (await session.execute(text(_RECALCULATE), {"id": repository_id})).scalar_one_or_none()
    after = before if after is None else after
    if after != before:
        await mark_repository_dirty(session, repository_id, "listing_change")
    return str(before), str(after)


async def refresh_repository_checks(session: AsyncSession, repository_id: int) -> int:
    """Authority revalidation after an account's role/state changed: recompute the quorum of every canonical of
    the repository, mark the keys of those that changed, re-derive their reports' verification and the
    repository metrics. Returns how many canonicals changed."""
    rows = (
        await session.execute(
            text(
                "SELECT id, pattern_key, last_seen_commit_sha FROM canonical_findings "
                "WHERE repository_id = :id ORDER BY id"
            ),
            {"id": repository_id},
        )
    ).all()
    changed_keys: list[str | None] = []
    changed = 0
    for canonical_id, key, commit in rows:
        if await recompute_canonical_status(session, int(canonical_id)):
            changed += 1
            changed_keys.append(key)
            await recompute_scans_at_commit(session, int(canonical_id), str(commit))
    if changed:
        await mark_dirty(session, changed_keys, "status")
        await recalculate_repository_metrics(session, repository_id)
    return changed
