"""Who may submit reports, record checks and verdicts, and how often: token scopes, the paused repository, the verifier
rule and the rate limits, asked on the actor as the transaction sees it (docs/domain.md §1.5, §1.6, §9)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import bindparam, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.accounts.models import Account
from app.accounts.service import refused_token
from app.kernel import db
from app.kernel.actors import can_verify, has_moderator_role, require_good_standing
from app.kernel.errors import Forbidden, NotFound, RateLimited
from app.kernel.quotas import DailyQuota, exempt_from_quotas, require_within_quota
from app.kernel.refs import normalize_ref
from app.kernel.sql import Fragment, compiled
from app.record.visibility import report_writable, repository_writable
from app.registry.models import Repository

SUBMIT_SCOPES = frozenset({"findings:submit", "reviews:submit"})
VERIFY_SCOPES = frozenset({"findings:verify", "reviews:verify"})

# §9 limits (moderators/admins exempt)
PER_MINUTE_LIMIT = 10
PER_REPOSITORY_MINUTE_LIMIT = 5
DAILY_QUOTA_REVIEWER = 100
DAILY_QUOTA_ACTIVE = 30
DAILY_QUOTA_OTHER = 3
# earned trust's high signal (app/trust/signal.py HIGH_*; the report path may not import app.trust)
HIGH_MIN_DECIDED = 20
HIGH_SIGNAL = 0.8
REPORTS_PER_DAY = DailyQuota("reports", DAILY_QUOTA_REVIEWER, DAILY_QUOTA_ACTIVE, DAILY_QUOTA_OTHER)


@dataclass(frozen=True)
class Actor:
    """The acting account as the transaction sees it (fresh role/state, not the caller's copy)."""

    id: int
    handle: str
    platform_role: str
    trust_tier: str
    state: str
    # its earned-trust signal as the worker last stored it (app/trust/signal.py): its new findings held for
    # review, or twice the daily report quota
    gated: bool = False
    high_signal: bool = False


@dataclass(frozen=True)
class RepositoryRow:
    id: int
    host: str
    owner: str
    name: str
    listing_status: str
    participation_mode: str
    submitted_by_id: int | None
    disclosure_days: int = 0  # a verified maintainer's coordinated-disclosure window (0: none)
    # any open embargo of it (the report path's first statement reads it): a duplicate of an embargoed finding is
    # held too, whatever the windows
    embargoes: bool = False


def require_scope(scopes: frozenset[str] | None, needed: frozenset[str]) -> None:
    # scopes=None: a trusted caller (CLI, seed) acting as the account itself
    if scopes is not None and not scopes & needed:
        raise Forbidden({"token": [f"needs one of the scopes {', '.join(sorted(needed))}"]})


_accounts = Account.__table__
_repositories = Repository.__table__
_ACTOR = select(*(_accounts.c[name] for name in ("id", "handle", "platform_role", "trust_tier", "state"))).where(
    _accounts.c.id == bindparam("id")
)
_LOAD_ACTOR = {False: compiled(_ACTOR), True: compiled(_ACTOR.with_for_update())}


# A report's first statement: its account row locked, then (the LATERAL join runs after it, so locks are taken in
# the order they always were) the repository it names, locked; the API token it was sent with, if any (the
# authoritative check: the route's pre-body check may be a remembered one, docs/security.md "API tokens"); and the
# report transaction's plan mode (docs/scaling.md "Transaction pooling": `plan_cache_mode`). The repository is read
# in this statement's snapshot, taken before any wait on the account lock: a repository registered during that wait
# answers "not registered", as it would have a moment earlier.
_SUBMITTER = text("""
WITH actor AS (
  SELECT id, handle, platform_role, trust_tier, state FROM accounts WHERE id = :aid FOR UPDATE
)
SELECT a.id, a.handle, a.platform_role, a.trust_tier, a.state,
       r.id AS rid, r.host, r.owner, r.name, r.listing_status, r.participation_mode, r.submitted_by_id,
       r.disclosure_days, r.embargoes, set_config('plan_cache_mode', :plans, true) AS plans,
       (SELECT t.revoked_at IS NULL FROM api_tokens t WHERE t.id = :tid AND t.account_id = a.id) AS token_live,
       g.gated IS TRUE AS gated, coalesce(g.decided >= :high_decided AND g.precision >= :high_precision, false) AS high
FROM actor a
LEFT JOIN account_signals g ON g.account_id = a.id
LEFT JOIN LATERAL (
  SELECT id, host, owner, name, listing_status, participation_mode, submitted_by_id, disclosure_days,
         EXISTS (SELECT 1 FROM disclosures d WHERE d.repository_id = repositories.id AND d.state = 'embargoed')
           AS embargoes
  FROM repositories
  WHERE host = :host AND owner = :owner AND name = :name AND a.id IS NOT NULL
  FOR UPDATE
) r ON TRUE
""")

# The report transaction's statements are keyed by ids (account, repository, scan, canonicals), never by a pattern
# key, so a generic plan made once per connection serves them all; every other transaction keeps the engine's
# force_custom_plan (app.kernel.db). `set_config(..., true)` is SET LOCAL: it ends with the transaction.
REPORT_PLANS = "auto"


async def load_submitter(
    session: AsyncSession, account_id: int, host: str, owner: str, name: str, *, token_id: int | None = None
) -> tuple[Actor, RepositoryRow | None]:
    """The submitting account (locked) and the repository it names (locked, under its normalized reference), in one
    statement that also lets the rest of the transaction use generic plans (`REPORT_PLANS`). With `token_id` (a
    request's API token), the bearer check's 401 when that token is revoked or gone: the route may have let the
    request in on a remembered check (`app.accounts.service.remembered_bearer_caller`)."""
    host, owner, name = normalize_ref(host, owner, name)
    params = {
        "aid": account_id, "host": host, "owner": owner, "name": name, "plans": REPORT_PLANS, "tid": token_id,
        "high_decided": HIGH_MIN_DECIDED, "high_precision": HIGH_SIGNAL,
    }  # fmt: skip
    found = await db.rows(session, _SUBMITTER, params)
    row = found[0] if found else None
    if token_id is not None and (row is None or not row.token_live):
        raise refused_token(revoked=row is not None and row.token_live is False)
    if row is None:
        raise Forbidden({"account": ["does not exist"]})
    actor = Actor(int(row[0]), str(row[1]), str(row[2]), str(row[3]), str(row[4]), bool(row.gated), bool(row.high))
    return actor, None if row.rid is None else replace(_repository(row[5:13]), embargoes=bool(row.embargoes))


async def load_actor(session: AsyncSession, account_id: int, *, lock: bool) -> Actor:
    row = (await session.execute(_LOAD_ACTOR[lock], {"id": account_id})).first()
    if row is None:
        raise Forbidden({"account": ["does not exist"]})
    return Actor(int(row[0]), str(row[1]), str(row[2]), str(row[3]), str(row[4]))


def require_acting_state(actor: Actor) -> None:
    require_good_standing(actor)


def require_verifier(actor: Actor) -> None:
    """§1.5 `verify_review` policy (repository memberships do not exist in this schema)."""
    require_acting_state(actor)
    if not can_verify(actor):
        raise Forbidden({"account": ["must be a reviewer or a moderator to record checks"]})


# --- the repository written to ---------------------------------------------------------------------------

_REPOSITORY = select(
    *(
        _repositories.c[name]
        for name in (
            "id",
            "host",
            "owner",
            "name",
            "listing_status",
            "participation_mode",
            "submitted_by_id",
            "disclosure_days",
        )
    )
).with_for_update()
_REPOSITORY_BY_NAME = compiled(
    _REPOSITORY.where(
        _repositories.c.host == bindparam("host"),
        _repositories.c.owner == bindparam("owner"),
        _repositories.c.name == bindparam("name"),
    )
)
_REPOSITORY_BY_ID = compiled(_REPOSITORY.where(_repositories.c.id == bindparam("id")))


def _repository(row: Any) -> RepositoryRow:
    return RepositoryRow(
        int(row[0]),
        str(row[1]),
        str(row[2]),
        str(row[3]),
        str(row[4]),
        str(row[5]),
        row[6] and int(row[6]),
        int(row[7]),
    )


async def repository_by_name(session: AsyncSession, host: str, owner: str, name: str) -> RepositoryRow | None:
    """The repository row, locked, under its normalized reference (host aliases resolved)."""
    host, owner, name = normalize_ref(host, owner, name)
    row = (await session.execute(_REPOSITORY_BY_NAME, {"host": host, "owner": owner, "name": name})).first()
    return None if row is None else _repository(row)


async def repository_by_id(session: AsyncSession, repository_id: int) -> RepositoryRow:
    row = (await session.execute(_REPOSITORY_BY_ID, {"id": repository_id})).one()
    return _repository(row)


def require_writable(actor: Actor, repo: RepositoryRow | None, hidden: dict[str, list[str]]) -> RepositoryRow:
    """The repository, if `actor` may write to it; otherwise NotFound with `hidden` (a quarantined record answers
    as if unregistered, see `app.record.visibility.repository_writable`)."""
    if repo is None or not repository_writable(
        actor, listing_status=repo.listing_status, submitted_by_id=repo.submitted_by_id
    ):
        raise NotFound(hidden)
    return repo


async def require_verifier_on(
    session: AsyncSession, actor: Actor, repository_id: int, hidden: dict[str, list[str]]
) -> RepositoryRow:
    """The repository of a finding or report that `actor` is about to check: writable, open, and the actor a
    verifier (in that order, so a hidden repository answers `hidden` before anything else)."""
    repo = require_writable(actor, await repository_by_id(session, repository_id), hidden)
    require_verifier(actor)
    require_not_paused(actor, repo)
    return repo


def require_report_writable(
    actor: Actor, *, visibility: str, submitted_by_id: int, hidden: dict[str, list[str]]
) -> None:
    if not report_writable(actor, visibility=visibility, submitted_by_id=submitted_by_id):
        raise NotFound(hidden)


def require_not_paused(actor: Actor, repo: RepositoryRow) -> None:
    if repo.participation_mode == "paused" and not has_moderator_role(actor):
        raise Forbidden({"repository": ["is paused: submissions and checks are closed"]})


# --- §9 rate limits --------------------------------------------------------------------------------------


# An account's stored reports in the rolling minute, the rolling minute on one repository, and the rolling day
RECENT_REPORTS = Fragment(
    "SELECT count(*) FILTER (WHERE inserted_at > now() - interval '1 minute') AS per_minute,"
    " count(*) FILTER (WHERE inserted_at > now() - interval '1 minute' AND repository_id = :rid) AS per_repo_minute,"
    " count(*) AS per_day FROM scans WHERE submitted_by_id = :aid AND inserted_at > now() - interval '1 day'"
)


class RepositoryRateLimited(RateLimited):
    """The per-repository minute's 429: the account may still write to other repositories (a batch goes on with
    them; every other report limit is the whole account's)."""


def require_within_limits(actor: Actor, per_minute: int, per_repo_minute: int, per_day: int) -> None:
    """§9 limits of `RECENT_REPORTS`' counts (read after the account row was locked), the daily quota first."""
    if exempt_from_quotas(actor):
        return
    # earned trust's reward: a high signal doubles the daily quota (docs/domain.md "Earned trust")
    require_within_quota(actor, REPORTS_PER_DAY, per_day, scale=2 if actor.high_signal else 1)
    if per_minute >= PER_MINUTE_LIMIT:
        raise RateLimited(
            {"rate_limit": [f"at most {PER_MINUTE_LIMIT} reports per minute per account"]}, retry_after=60
        )
    if per_repo_minute >= PER_REPOSITORY_MINUTE_LIMIT:
        raise RepositoryRateLimited(
            {"rate_limit": [f"at most {PER_REPOSITORY_MINUTE_LIMIT} reports per minute per repository"]},
            retry_after=60,
        )
