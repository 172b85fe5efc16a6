"""The status quorum, recomputed from scratch every time: which checks count and the status rule (docs/domain.md §1.5);
updates move `updated_at` only on a real change (§2.7)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import literal, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.accounts.models import Account
from app.kernel.actors import qualified_reviewer
from app.kernel.sql import statement
from app.record.outbox import mark_dirty
from app.registry.metrics import recalculate_repository_metrics

THRESHOLD = 2
COLLUSION_WINDOW = "7 days"


@dataclass(frozen=True)
class Tally:
    confirmed: int = 0
    disputed: int = 0
    fixed: int = 0


def status_for(tally: Tally) -> str:
    """Status rule with threshold 2: fixed, else verified, else disputed, else open."""
    if tally.fixed - tally.disputed >= THRESHOLD:
        return "fixed"
    if tally.confirmed - tally.disputed >= THRESHOLD:
        return "verified"
    if tally.disputed > tally.confirmed:
        return "disputed"
    return "open"


def meets_quorum(tally: Tally) -> bool:
    return status_for(tally) in ("fixed", "verified")


_ACCOUNTS = Account.__table__.alias("a")

# Qualified verdict counts of many canonicals, each at its own commit, in one statement.
_TALLY = statement(
    """
WITH wanted AS (
  SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:commits AS text[])) AS w(canonical_id, commit_sha)
), colluding AS (
  SELECT o.canonical_finding_id, o.client_ip_hash FROM canonical_finding_checks o
  WHERE o.canonical_finding_id IN (SELECT canonical_id FROM wanted) AND o.client_ip_hash IS NOT NULL
    AND o.inserted_at >= now() - interval {collusion_window}
  GROUP BY o.canonical_finding_id, o.client_ip_hash HAVING count(DISTINCT o.account_id) > 1
)
SELECT ch.canonical_finding_id, ch.verdict, count(*) FROM canonical_finding_checks ch
JOIN wanted w ON w.canonical_id = ch.canonical_finding_id AND w.commit_sha = ch.commit_sha
JOIN accounts a ON a.id = ch.account_id
WHERE ch.provenance IN ('human', 'hybrid')
  AND a.state = 'active'
  AND {qualified}
  AND NOT EXISTS (SELECT 1 FROM colluding x
                  WHERE x.canonical_finding_id = ch.canonical_finding_id AND x.client_ip_hash = ch.client_ip_hash)
  AND NOT EXISTS (SELECT 1 FROM repository_maintainers m JOIN canonical_findings mc ON mc.repository_id = m.repository_id
                  WHERE mc.id = ch.canonical_finding_id AND m.account_id = ch.account_id)
GROUP BY ch.canonical_finding_id, ch.verdict
""",
    collusion_window=literal(COLLUSION_WINDOW),
    qualified=qualified_reviewer(_ACCOUNTS),
)


async def tally_many(session: AsyncSession, commits: dict[int, str]) -> dict[int, Tally]:
    """Qualified verdict counts per canonical (id -> the commit to count at); a canonical without counted checks is
    left out (its tally is `Tally()`)."""
    if not commits:
        return {}
    params = {"ids": list(commits), "commits": list(commits.values())}
    counts: dict[int, dict[str, int]] = {}
    for canonical_id, verdict, n in await session.execute(_TALLY, params):
        counts.setdefault(int(canonical_id), {})[str(verdict)] = int(n)
    return {cid: Tally(c.get("confirmed", 0), c.get("disputed", 0), c.get("fixed", 0)) for cid, c in counts.items()}


# Each rule of the tally above, tested alone for one check: why a recorded check does not count (the check's answer).
_CHECK_RULES = statement(
    """
SELECT ch.commit_sha = c.last_seen_commit_sha AS at_commit, c.last_seen_commit_sha,
       ch.provenance IN ('human', 'hybrid') AS by_human, a.state, a.state = 'active' AS active,
       {qualified} AS qualified,
       EXISTS (SELECT 1 FROM repository_maintainers m
               WHERE m.repository_id = c.repository_id AND m.account_id = ch.account_id) AS maintainer,
       ch.client_ip_hash IS NOT NULL AND EXISTS (
         SELECT 1 FROM canonical_finding_checks o
         WHERE o.canonical_finding_id = ch.canonical_finding_id AND o.client_ip_hash = ch.client_ip_hash
           AND o.account_id <> ch.account_id AND o.inserted_at >= now() - interval {collusion_window}) AS colluding
FROM canonical_finding_checks ch
JOIN canonical_findings c ON c.id = ch.canonical_finding_id
JOIN accounts a ON a.id = ch.account_id
WHERE ch.id = :id
""",
    collusion_window=literal(COLLUSION_WINDOW),
    qualified=qualified_reviewer(_ACCOUNTS),
)

NOT_COUNTED = "recorded, not counted toward the quorum: "


async def why_not_counted(session: AsyncSession, check_id: int) -> str | None:
    """None when the check counts toward its canonical's quorum now, else the first rule of §1.5 it fails, in
    words a newcomer can act on (each names its rule: commit, provenance, state, tier, maintainer, same address)."""
    row = (await session.execute(_CHECK_RULES, {"id": check_id})).mappings().one()
    if not row["at_commit"]:
        return NOT_COUNTED + (
            f"checks count only at the finding's latest commit ({row['last_seen_commit_sha']}), "
            "and this commit is an older one (docs/domain.md §1.5)"
        )
    if not row["by_human"]:
        return NOT_COUNTED + (
            'provenance is "agent" (the default), and only human or hybrid checks count; '
            'send "provenance": "human" when a person checked it (docs/domain.md §1.5)'
        )
    if not row["active"]:
        return NOT_COUNTED + (
            f"your account's state is {row['state']}; only checks by active accounts count (docs/domain.md §1.5)"
        )
    if not row["qualified"]:
        return NOT_COUNTED + (
            "your account is not a qualified reviewer (trust tier reviewer, or role moderator or admin) "
            "(docs/domain.md §1.5)"
        )
    if row["maintainer"]:
        return NOT_COUNTED + (
            "you are or were a verified maintainer of this repository, and a maintainer's checks are recorded, "
            "never counted (docs/domain.md §1.5, §14)"
        )
    if row["colluding"]:
        return NOT_COUNTED + (
            f"another account checked this finding from the same address (IPv4 address or IPv6 /64) within "
            f"{COLLUSION_WINDOW}, so every check from that address is dropped (anti-collusion, docs/domain.md §1.5); "
            "two reviewers on one machine must connect from different addresses"
        )
    return None


_APPLY_STATUS = """
UPDATE canonical_findings SET
  status = :status, confirmations_count = :c, disputes_count = :d,
  verified_at = CASE WHEN :status IN ('verified', 'fixed') THEN coalesce(verified_at, now()) END,
  updated_at = now()
WHERE id = :id
  AND (status, confirmations_count, disputes_count, verified_at) IS DISTINCT FROM
      (:status, :c, :d, CASE WHEN :status IN ('verified', 'fixed') THEN coalesce(verified_at, now()) END)
"""

_CURRENT = """
SELECT id, last_seen_commit_sha, status, confirmations_count, disputes_count, verified_at IS NOT NULL
FROM canonical_findings WHERE id = ANY(CAST(:ids AS bigint[]))
"""


async def recompute_canonical_status(session: AsyncSession, canonical_id: int) -> bool:
    """Recompute status, confirmations_count (C), disputes_count (D) and verified_at of one canonical.
    Returns True when any of them changed (and only then `updated_at` moved)."""
    return canonical_id in await recompute_canonical_statuses(session, [canonical_id])


async def recompute_canonical_statuses(session: AsyncSession, canonical_ids: list[int]) -> set[int]:
    """`recompute_canonical_status` of many canonicals: two reads for all, then an update only for those whose
    values change (a new report's fresh canonicals usually need none). Returns the ids that changed."""
    if not canonical_ids:
        return set()
    current = (await session.execute(text(_CURRENT), {"ids": canonical_ids})).all()
    tallies = await tally_many(session, {int(row[0]): str(row[1]) for row in current})
    changed: set[int] = set()
    for canonical_id, _commit, status, c, d, verified in current:
        tally = tallies.get(int(canonical_id), Tally())
        new_status = status_for(tally)
        if (new_status, tally.confirmed, tally.disputed, new_status in ("verified", "fixed")) == (
            status,
            c,
            d,
            verified,
        ):
            continue  # the update's own IS DISTINCT FROM guard would match nothing
        result = await session.execute(
            text(_APPLY_STATUS),
            {"id": int(canonical_id), "status": new_status, "c": tally.confirmed, "d": tally.disputed},
        )
        if result.rowcount:  # type: ignore[attr-defined]
            changed.add(int(canonical_id))
    return changed


_REPORT_TALLY = statement(
    """
SELECT sc.verdict, count(*) FROM scan_confirmations sc
JOIN accounts a ON a.id = sc.account_id
WHERE sc.scan_id = :scan_id AND sc.provenance IN ('human', 'hybrid') AND a.state = 'active'
  AND {qualified}
GROUP BY sc.verdict
""",
    qualified=qualified_reviewer(_ACCOUNTS),
)

_APPLY_SCAN = """
UPDATE scans SET
  confirmations_count = :c, disputes_count = :d,
  verified_at = CASE WHEN :verified THEN coalesce(verified_at, now()) END,
  review_status = CASE WHEN NOT :verified AND review_status = 'accepted' THEN 'contested' ELSE review_status END,
  moderation_reason = CASE WHEN NOT :verified AND review_status = 'accepted'
                           THEN 'verification_quorum_lost' ELSE moderation_reason END,
  moderation_notes = CASE WHEN NOT :verified AND review_status = 'accepted'
                          THEN 'Automatically contested: the report no longer meets the verification quorum.'
                          ELSE moderation_notes END,
  reviewed_at = CASE WHEN NOT :verified AND review_status = 'accepted' THEN now() ELSE reviewed_at END,
  updated_at = now()
WHERE id = :id
  AND (confirmations_count, disputes_count, verified_at IS NOT NULL) IS DISTINCT FROM (:c, :d, :verified)
"""


async def recompute_scan_verification(session: AsyncSession, scan_id: int) -> bool:
    """Report-level `verified_at` (§1.5 last paragraph): every canonical of the report meets quorum at the
    report's commit, or, for a report without canonicals, its own qualified confirmations C−D ≥ 2.
    Losing quorum on an accepted report flips it to contested (`verification_quorum_lost`). Returns changed."""
    commit = (
        await session.execute(text("SELECT commit_sha FROM scans WHERE id = :id"), {"id": scan_id})
    ).scalar_one_or_none()
    if commit is None:
        return False
    rows = (await session.execute(_REPORT_TALLY, {"scan_id": scan_id})).all()
    counts = {str(verdict): int(n) for verdict, n in rows}
    report = Tally(counts.get("confirmed", 0), counts.get("disputed", 0))
    canonical_ids = (
        (
            await session.execute(
                text(
                    "SELECT DISTINCT canonical_finding_id FROM scan_findings "
                    "WHERE scan_id = :id AND canonical_finding_id IS NOT NULL AND published_at IS NOT NULL ORDER BY 1"
                ),
                {"id": scan_id},
            )
        )
        .scalars()
        .all()
    )
    if canonical_ids:
        tallies = await tally_many(session, {int(cid): str(commit) for cid in canonical_ids})
        verified = all(meets_quorum(tallies.get(int(cid), Tally())) for cid in canonical_ids)
    else:
        verified = report.confirmed - report.disputed >= THRESHOLD
    result = await session.execute(
        text(_APPLY_SCAN), {"id": scan_id, "c": report.confirmed, "d": report.disputed, "verified": verified}
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


async def recompute_scans_at_commit(session: AsyncSession, canonical_id: int, commit_sha: str) -> int:
    """Report-level verification of every report that carries this canonical at this commit."""
    scan_ids = (
        (
            await session.execute(
                text(
                    "SELECT DISTINCT s.id FROM scans s JOIN scan_findings f ON f.scan_id = s.id "
                    "WHERE f.canonical_finding_id = :cid AND s.commit_sha = :sha AND f.published_at IS NOT NULL "
                    "ORDER BY s.id"
                ),
                {"cid": canonical_id, "sha": commit_sha},
            )
        )
        .scalars()
        .all()
    )
    changed = 0
    for scan_id in scan_ids:
        changed += await recompute_scan_verification(session, int(scan_id))
    return changed


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
        await mark_dirty(session, changed_keys, "status", repository_id=repository_id)
        await recalculate_repository_metrics(session, repository_id)
    return changed
