"""The forge's record of a repository (docs/domain.md §1.1, docs/forge.md): looked up before a registration's
transaction, looked up again by the worker while `pending`, refreshed by the daily run with the stored ETag, and the
`forge_missing` quarantine of a listed repository the forge no longer has. Network outside every transaction."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.forge import api as forge
from app.forge.api import RepoInfo
from app.kernel import db
from app.kernel.audit import record_audit
from app.kernel.config import FORGE_BASE_SETTINGS, forge_budget_seconds
from app.kernel.errors import ValidationError
from app.kernel.refs import ref_slug
from app.registry.listing_status import set_listing_status
from app.registry.metrics import registry_changed
from app.registry.models import Repository

log = logging.getLogger(__name__)

FORGE_MISSING = "forge_missing"  # the audit reason of the quarantine, and of nothing else
REGISTRY_ACTOR = None  # the registry's own actions are audited with no account (the audit page says "the registry")
MISSING_RUNS = 2  # consecutive `missing` answers that quarantine a listed repository
PENDING_RETRY = timedelta(minutes=5)  # a pending lookup is retried at most this often
PENDING_PER_RUN = 50
REFRESH_PER_RUN = 2000  # the daily run's bound; oldest `metadata_checked_at` first, the rest wait a day
FAILURES_TO_STOP = 3  # consecutive failed answers end a run: the forge is down or its rate is spent


@dataclass(frozen=True)
class Lookup:
    """What a registration learnt before its transaction: the state to store and, when found, the record."""

    state: str  # unchecked | pending | found
    info: RepoInfo | None = None
    etag: str | None = None

    def values(self) -> dict[str, Any]:
        """The columns a new row gets from this lookup."""
        if self.info is None:
            return {"metadata_state": self.state}
        return {**_found_values(self.info, self.etag), "metadata_checked_at": func.now()}


def _found_values(info: RepoInfo, etag: str | None) -> dict[str, Any]:
    return {
        "metadata_state": "found",
        "default_branch": info.default_branch,
        "description": info.description,
        "primary_language": info.language,
        "stars_count": info.stars,
        "archived": info.archived,
        "forge_id": info.forge_id,
        "metadata_etag": etag,
        "forge_missing_runs": 0,
        "forge_redirect": None,
    }


def _deadline() -> float:
    return time.monotonic() + forge_budget_seconds()


async def look_up(host: str, owner: str, name: str) -> Lookup:
    """The registration's lookup, bounded by FORGE_BUDGET_SECONDS. ValidationError on `name` when the forge has no
    such public repository (GitHub answers a private one the same) or redirects it to another name; `pending` when
    the forge fails or its rate is spent; `unchecked` when the gate is off for this host."""
    if not forge.evidence_enabled(host):
        return Lookup("unchecked")
    answer = await forge.repository(host, owner, name, deadline=_deadline())
    if answer.outcome == "found" and answer.value is not None and not answer.value.private:
        return Lookup("found", answer.value, answer.etag)
    if answer.outcome in ("missing", "found"):
        raise ValidationError({"name": [f"not found on {host}"]})
    if answer.redirect:
        raise ValidationError({"name": [f"{host} now calls it {answer.redirect}: register that name"]})
    log.info("metadata of %s pending: %s", ref_slug(host, owner, name), answer.detail)
    return Lookup("pending")


async def quarantine_forge_missing(session: AsyncSession, repository: Repository, why: str) -> None:
    """A listed repository the forge no longer has leaves every listed surface the way a moderator's takedown does
    (the same listing write, the same audited action; the audit purges its pages), with the registry as actor."""
    before = await set_listing_status(session, repository, "quarantined")
    await record_audit(
        session,
        actor_id=REGISTRY_ACTOR,
        action="repository.listing",
        subject_type="repository",
        subject_id=ref_slug(repository.host, repository.owner, repository.name),
        before=before,
        after={"listing_status": "quarantined"},
        reason=FORGE_MISSING,
        notes=why,
    )
    registry_changed()


async def _apply(repository_id: int, answer: forge.Answer[RepoInfo]) -> str:
    """Store one lookup's answer under the row's lock; returns what happened (for the run's summary)."""
    async with db.transaction() as session:
        repo = (
            await session.execute(select(Repository).where(Repository.id == repository_id).with_for_update())
        ).scalar_one_or_none()
        if repo is None:
            return "gone"
        slug = ref_slug(repo.host, repo.owner, repo.name)
        info = answer.value
        if answer.outcome == "found" and info is not None and not info.private:
            if repo.forge_id is not None and repo.forge_id != info.forge_id:
                if repo.listing_status != "listed":
                    return "forge_id_changed"
                why = f"{repo.host} now gives {slug} to another repository (id {info.forge_id}, was {repo.forge_id})"
                await quarantine_forge_missing(session, repo, why)
                repo.metadata_checked_at = db.utcnow()
                return "quarantined"
            for column, value in _found_values(info, answer.etag).items():
                setattr(repo, column, value)
        elif answer.outcome == "not_modified":
            repo.forge_missing_runs = 0
        elif answer.outcome in ("missing", "found"):  # a repository gone private is missing to the public
            repo.forge_missing_runs += 1
            if repo.forge_missing_runs >= MISSING_RUNS and repo.listing_status == "listed":
                why = f"{repo.host} answered not found for {slug} on {repo.forge_missing_runs} lookups in a row"
                await quarantine_forge_missing(session, repo, why)
                repo.metadata_checked_at = db.utcnow()
                return "quarantined"
            if repo.forge_missing_runs >= MISSING_RUNS and repo.metadata_state == "pending":
                repo.metadata_state = "unchecked"  # not listed: nothing to take down, no more retries
        elif answer.outcome == "refused":
            repo.forge_redirect = answer.redirect or repo.forge_redirect  # a 401 says nothing of the name
            if repo.metadata_state == "pending":  # nothing to store: the daily run asks again
                repo.metadata_state = "unchecked"
        else:  # failed: a pending one is retried after PENDING_RETRY, a refresh tomorrow
            if repo.metadata_state == "pending":
                repo.metadata_checked_at = db.utcnow()
            return "failed"
        repo.metadata_checked_at = db.utcnow()
        return answer.outcome


async def _ask(rows: list[Any]) -> dict[str, int]:
    summary: dict[str, int] = {}
    failures = 0
    for row in rows:
        etag = row.metadata_etag if row.metadata_state == "found" else None
        answer = await forge.repository(row.host, row.owner, row.name, etag=etag, deadline=_deadline())
        outcome = await _apply(row.id, answer)
        summary[outcome] = summary.get(outcome, 0) + 1
        failures = failures + 1 if outcome == "failed" else 0
        if failures >= FAILURES_TO_STOP:
            log.info("metadata run stopped after %d failed lookups: %s", failures, answer.detail)
            break
    return summary


_R = Repository.__table__
_COLUMNS = (_R.c.id, _R.c.host, _R.c.owner, _R.c.name, _R.c.metadata_state, _R.c.metadata_etag)


async def _candidates(query: Any) -> list[Any]:
    hosts = [host for host in FORGE_BASE_SETTINGS if forge.evidence_enabled(host)]
    if not hosts:
        return []
    async with db.read_session(replica=False) as session:
        return list((await session.execute(query.where(_R.c.host.in_(hosts)))).all())


async def look_up_pending(*, limit: int = PENDING_PER_RUN) -> dict[str, int]:
    """The worker's lookup of repositories registered while the forge failed (every few minutes)."""
    due = or_(_R.c.metadata_checked_at.is_(None), _R.c.metadata_checked_at < func.now() - PENDING_RETRY)
    query = (
        select(*_COLUMNS)
        .where(_R.c.metadata_state == "pending", _R.c.listing_status != "quarantined", due)
        .order_by(_R.c.metadata_checked_at.asc().nulls_first(), _R.c.id)
        .limit(limit)
    )
    return await _ask(await _candidates(query))


async def refresh_listed(*, limit: int = REFRESH_PER_RUN) -> dict[str, int]:
    """The daily refresh: listed repositories, oldest `metadata_checked_at` first (never checked first), each asked
    with its stored ETag (a 304 costs no rate on GitHub)."""
    query = (
        select(*_COLUMNS)
        .where(_R.c.listing_status == "listed")
        .order_by(_R.c.metadata_checked_at.asc().nulls_first(), _R.c.id)
        .limit(limit)
    )
    return await _ask(await _candidates(query))
