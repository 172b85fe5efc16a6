"""The status quorum (docs/domain.md §1.5): transitions, who counts, IP collusion, per-commit reset, authority
revalidation, and a randomized comparison of the SQL tally against a direct implementation of the rule."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text

from app.accounts.models import Account
from app.kernel import db
from app.registry.models import Repository
from app.reports.checks import record_check
from app.reports.finding_memory import pattern_key
from app.reports.quorum import Tally, recompute_canonical_status, refresh_repository_checks, status_for
from app.reports.service import submit_report
from tests import factories
from tests.reports.support import COMMIT, NOTES, finding, report_body, reviewer

SHA_A, SHA_B = COMMIT, "b" * 40


async def reported(commit_sha: str = SHA_A) -> tuple[Repository, str]:
    """A repository with one report of one finding; returns its canonical public id."""
    submitter = await factories.create_account(state="active")
    repo = await factories.create_repository()
    result = await submit_report(
        submitter, repo.host, repo.owner, repo.name, report_body(findings=[finding()], commit_sha=commit_sha)
    )
    return repo, str(result["findings"][0]["canonical_public_id"])


async def check(
    account: Account,
    canonical: str,
    verdict: str,
    *,
    provenance: str = "human",
    ip: str | None = None,
    commit_sha: str = SHA_A,
) -> dict[str, Any]:
    body = {"commit_sha": commit_sha, "verdict": verdict, "provenance": provenance, "notes": NOTES}
    return await record_check(account, canonical, body, client_ip=ip)


async def canonical_row(public_id: str) -> dict[str, Any]:
    async with db.read_session(replica=False) as session:
        row = await session.execute(text("SELECT * FROM canonical_findings WHERE public_id = :p"), {"p": public_id})
        return dict(row.mappings().one())


async def test_transitions_open_verified_open_disputed() -> None:
    _, canonical = await reported()
    assert (await check(await reviewer(), canonical, "confirmed"))["status"] == "open"
    verified = await check(await reviewer(), canonical, "confirmed")
    assert (verified["status"], verified["confirmations_count"], verified["disputes_count"]) == ("verified", 2, 0)
    row = await canonical_row(canonical)
    assert row["verified_at"] is not None
    reopened = await check(await reviewer(), canonical, "disputed")  # C−D = 1
    assert (reopened["status"], reopened["disputes_count"]) == ("open", 1)
    assert (await canonical_row(canonical))["verified_at"] is None
    await check(await reviewer(), canonical, "disputed")  # C = D = 2: open
    disputed = await check(await reviewer(), canonical, "disputed")  # D > C
    assert (disputed["status"], disputed["confirmations_count"], disputed["disputes_count"]) == ("disputed", 2, 3)


async def test_fixed_wins_and_keeps_verified_at() -> None:
    _, canonical = await reported()
    await check(await reviewer(), canonical, "confirmed")
    await check(await reviewer(), canonical, "confirmed")
    verified_at = (await canonical_row(canonical))["verified_at"]
    await check(await reviewer(), canonical, "fixed")
    fixed = await check(await reviewer(), canonical, "fixed")
    assert fixed["status"] == "fixed"  # F−D ≥ 2 is tested before C−D
    assert (await canonical_row(canonical))["verified_at"] == verified_at


async def test_only_qualified_human_checks_count() -> None:
    _, canonical = await reported()
    agent = await check(await reviewer(), canonical, "confirmed", provenance="agent")
    assert agent["confirmations_count"] == 0
    probation = await check(await reviewer(state="probation"), canonical, "confirmed")
    assert probation["confirmations_count"] == 0  # may record, does not count
    moderator = await check(
        await factories.create_account(state="active", platform_role="moderator"), canonical, "confirmed"
    )
    assert moderator["confirmations_count"] == 1
    hybrid = await check(await reviewer(), canonical, "confirmed", provenance="hybrid")
    assert (hybrid["confirmations_count"], hybrid["status"]) == (2, "verified")


async def test_same_ip_checks_by_different_accounts_are_dropped_on_both_sides() -> None:
    _, canonical = await reported()
    await check(await reviewer(), canonical, "confirmed", ip="198.51.100.9")
    colluding = await check(await reviewer(), canonical, "confirmed", ip="198.51.100.9")
    assert (colluding["confirmations_count"], colluding["status"]) == (0, "open")
    honest = await check(await reviewer(), canonical, "confirmed", ip="192.0.2.44")
    assert honest["confirmations_count"] == 1
    # the exclusion looks back 7 days from now: once one side is older, both count again
    row = await canonical_row(canonical)
    async with db.transaction() as session:
        await session.execute(
            text(
                "UPDATE canonical_finding_checks SET inserted_at = now() - interval '8 days' WHERE id = "
                "(SELECT min(id) FROM canonical_finding_checks WHERE canonical_finding_id = :c)"
            ),
            {"c": row["id"]},
        )
        assert await recompute_canonical_status(session, row["id"])
    after = await canonical_row(canonical)
    assert (after["confirmations_count"], after["status"]) == (3, "verified")


async def test_the_same_address_rule_groups_addresses_as_login_does() -> None:
    # one IPv6 /64 is one address, and an IPv4-mapped IPv6 address is its IPv4 (app.ops.secrets.client_address)
    for first, second in (("2001:db8::1", "2001:db8::ffff:2"), ("198.51.100.7", "::ffff:198.51.100.7")):
        _, canonical = await reported()
        await check(await reviewer(), canonical, "confirmed", ip=first)
        colluding = await check(await reviewer(), canonical, "confirmed", ip=second)
        assert (colluding["confirmations_count"], colluding["status"]) == (0, "open"), (first, second)
    _, canonical = await reported()
    await check(await reviewer(), canonical, "confirmed", ip="2001:db8::1")
    next_prefix = await check(await reviewer(), canonical, "confirmed", ip="2001:db8:0:1::1")
    assert (next_prefix["confirmations_count"], next_prefix["status"]) == (2, "verified")


async def test_quorum_is_per_commit() -> None:
    repo, canonical = await reported(SHA_A)
    await check(await reviewer(), canonical, "confirmed")
    await check(await reviewer(), canonical, "confirmed")
    assert (await canonical_row(canonical))["status"] == "verified"
    again = await factories.create_account(state="active")
    await submit_report(again, repo.host, repo.owner, repo.name, report_body(commit_sha=SHA_B))
    row = await canonical_row(canonical)
    assert (row["last_seen_commit_sha"], row["status"], row["confirmations_count"]) == (SHA_B, "open", 0)
    # checks at the old commit remain recordable but do not count
    stale = await check(await reviewer(), canonical, "confirmed", commit_sha=SHA_A)
    assert (stale["status"], stale["confirmations_count"]) == ("open", 0)
    await check(await reviewer(), canonical, "confirmed", commit_sha=SHA_B)
    fresh = await check(await reviewer(), canonical, "confirmed", commit_sha=SHA_B)
    assert (fresh["status"], fresh["confirmations_count"]) == ("verified", 2)


async def test_authority_revalidation_flips_status_and_marks_dirty() -> None:
    repo, canonical = await reported()
    demoted = await reviewer()
    await check(demoted, canonical, "confirmed")
    await check(await reviewer(), canonical, "confirmed")
    async with db.transaction() as session:
        await session.execute(text("DELETE FROM infestation_dirty_keys"))
        await session.execute(text("UPDATE accounts SET trust_tier = 'contributor' WHERE id = :id"), {"id": demoted.id})
        assert await refresh_repository_checks(session, repo.id) == 1
    row = await canonical_row(canonical)
    assert (row["status"], row["confirmations_count"]) == ("open", 1)
    async with db.read_session(replica=False) as session:
        dirty = (await session.execute(text("SELECT pattern_key, reason FROM infestation_dirty_keys"))).all()
        verified_count = (
            await session.execute(
                text("SELECT verified_findings_count FROM repositories WHERE id = :id"), {"id": repo.id}
            )
        ).scalar_one()
    assert [tuple(d) for d in dirty] == [(pattern_key("SQL injection in login"), "status")]
    assert verified_count == 0
    async with db.transaction() as session:  # nothing changed since: nothing to do, nothing marked
        assert await refresh_repository_checks(session, repo.id) == 0


# --- randomized comparison with a direct implementation of the rule ------------------------------------------


@dataclass(frozen=True)
class RandomCheck:
    state: str
    trust_tier: str
    platform_role: str
    commit_sha: str
    provenance: str
    verdict: str
    ip: str | None
    age_days: int


def reference_status(checks: list[RandomCheck], last_commit: str) -> tuple[str, int, int]:
    recent = [(i, c.ip) for i, c in enumerate(checks) if c.ip is not None and c.age_days < 7]
    colluding = {ip for _, ip in recent if len({i for i, other in recent if other == ip}) > 1}
    counted = [
        c
        for c in checks
        if c.commit_sha == last_commit
        and c.provenance in ("human", "hybrid")
        and c.state == "active"
        and (c.trust_tier == "reviewer" or c.platform_role in ("moderator", "admin"))
        and c.ip not in colluding
    ]
    tally = {v: sum(1 for c in counted if c.verdict == v) for v in ("confirmed", "disputed", "fixed")}
    c, d, f = tally["confirmed"], tally["disputed"], tally["fixed"]
    if f - d >= 2:
        status = "fixed"
    elif c - d >= 2:
        status = "verified"
    elif d > c:
        status = "disputed"
    else:
        status = "open"
    return status, c, d


def random_check(rng: random.Random) -> RandomCheck:
    return RandomCheck(
        state=rng.choice(["active"] * 6 + ["probation", "restricted"]),
        trust_tier=rng.choice(["reviewer"] * 4 + ["contributor", "new"]),
        platform_role=rng.choice(["member"] * 4 + ["moderator", "admin"]),
        commit_sha=rng.choice([SHA_A] * 5 + [SHA_B]),
        provenance=rng.choice(["human", "human", "hybrid", "agent"]),
        verdict=rng.choice(["confirmed", "confirmed", "disputed", "fixed", "fixed"]),
        ip=rng.choice([None, None, None, "ip-1", "ip-2"]),
        age_days=rng.choice([0, 0, 3, 8]),
    )


async def test_sql_tally_matches_the_rule_on_random_check_sets() -> None:
    rng = random.Random(20261129)
    seen_statuses: set[str] = set()
    for _ in range(40):
        _, canonical = await reported(SHA_A)
        row = await canonical_row(canonical)
        checks = [random_check(rng) for _ in range(rng.randint(0, 8))]
        async with db.transaction() as session:
            now: datetime = (await session.execute(text("SELECT now()"))).scalar_one()
        for c in checks:
            account = await factories.create_account(
                state=c.state, trust_tier=c.trust_tier, platform_role=c.platform_role
            )
            async with db.transaction() as session:  # direct rows: states may have changed after checking
                await session.execute(
                    text(
                        "INSERT INTO canonical_finding_checks (canonical_finding_id, account_id, commit_sha, verdict,"
                        " provenance, notes, client_ip_hash, inserted_at)"
                        " VALUES (:c, :a, :sha, :v, :p, 'randomized check notes', :ip, :at)"
                    ),
                    {
                        "c": row["id"],
                        "a": account.id,
                        "sha": c.commit_sha,
                        "v": c.verdict,
                        "p": c.provenance,
                        "ip": c.ip.encode() if c.ip else None,
                        "at": now - timedelta(days=c.age_days),
                    },
                )
        async with db.transaction() as session:
            await recompute_canonical_status(session, row["id"])
        after = await canonical_row(canonical)
        expected = reference_status(checks, SHA_A)
        assert (after["status"], after["confirmations_count"], after["disputes_count"]) == expected, checks
        assert (after["verified_at"] is not None) == (expected[0] in ("verified", "fixed"))
        seen_statuses.add(expected[0])
    assert seen_statuses == {"open", "verified", "disputed", "fixed"}  # the sample exercised every branch


def test_status_rule_table() -> None:
    assert status_for(Tally(confirmed=2)) == "verified"
    assert status_for(Tally(confirmed=5, fixed=2)) == "fixed"
    assert status_for(Tally(confirmed=3, disputed=2)) == "open"
    assert status_for(Tally(confirmed=1, disputed=2)) == "disputed"
    assert status_for(Tally(fixed=3, disputed=1)) == "fixed"
    assert status_for(Tally(fixed=2, disputed=1, confirmed=3)) == "verified"
    assert status_for(Tally()) == "open"
