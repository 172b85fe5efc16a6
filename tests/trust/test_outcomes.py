"""Earned trust (docs/domain.md "Earned trust"): each outcome moves the signal of the account, the model and the
tool rule that reported the finding first, by the rule; outcomes latch; duplicates count nothing; the maintained
table equals a recompute from source; precision rows stay hidden below their thresholds."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.accounts.models import Account
from app.accounts.service import create_token
from app.kernel import db
from app.moderation.service import change_scan_visibility
from app.reports.checks import record_check
from app.reports.service import submit_report
from app.trust import refresh as trust_refresh
from app.trust.refresh import recompute, refresh
from app.trust.signal import signal_of, store_signals
from tests import factories
from tests.reports.support import COMMIT, check_body, finding, report_body, reviewer

NOTES = "Restricted after review: the report cites code that is not there."


async def _report(account: Account, repo: Any, title: str, *, commit: str = COMMIT, **envelope: Any) -> dict[str, Any]:
    body = report_body([finding(title=title, file=f"src/{title.replace(' ', '_')}.py")], commit_sha=commit, **envelope)
    return await submit_report(account, repo.host, repo.owner, repo.name, body)


async def _check(canonical: str, verdict: str, *, commit: str = COMMIT, times: int = 2) -> None:
    for _ in range(times):
        await record_check(await reviewer(), canonical, check_body(verdict=verdict, commit_sha=commit))


async def _outcomes() -> list[tuple[Any, ...]]:
    async with db.read_session(replica=False) as session:
        rows = await session.execute(
            text(
                "SELECT account_id, outcome, model, prompt_version, tool, rule_id, canonical_finding_id,"
                " scan_finding_id, refusal_id, decided_at FROM finding_outcomes ORDER BY account_id, outcome, id"
            )
        )
        return [tuple(r) for r in rows]


async def _signal(account: Account) -> Any:
    async with db.read_session(replica=False) as session:
        return await signal_of(session, account.id)


async def test_verified_disputed_withdrawn_and_refused_each_move_the_reporters_signal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(trust_refresh, "LOOKBACK", timedelta(0))  # each run sees only what moved since the last
    repo = await factories.create_repository()
    alice, bob = await factories.create_account(), await factories.create_account()
    withdrawn = await _report(bob, repo, "Open redirect in callback")
    await refresh()  # bob's report is older than this run: only the audit log says it was withdrawn
    verified = await _report(alice, repo, "SQL injection in login", model="model-a", prompt_version="p/1")
    disputed = await _report(alice, repo, "Hardcoded secret in config", model="model-a", prompt_version="p/1")
    await _check(verified["findings"][0]["canonical_public_id"], "confirmed")
    await _check(disputed["findings"][0]["canonical_public_id"], "disputed")
    moderator = await factories.create_account(platform_role="moderator")
    await change_scan_visibility(moderator, withdrawn["id"], "restricted", "not reproducible", NOTES)
    async with db.transaction() as session:
        await session.execute(
            text("INSERT INTO report_refusals (account_id, repository_id, reason) VALUES (:a, :r, :why)"),
            {"a": bob.id, "r": repo.id, "why": "findings[0].file: not found at its commit"},
        )

    assert (await _signal(alice)).counts.decided == 0  # nothing is counted until the worker (or a drain) runs
    await refresh()

    a, b = await _signal(alice), await _signal(bob)
    assert (a.counts.decided, a.counts.verified, a.counts.disputed) == (2, 1, 1)
    assert a.counts.precision == pytest.approx((1 + 2) / (2 + 4))
    assert (b.counts.decided, b.counts.withdrawn, b.counts.refused, b.counts.verified) == (2, 1, 1, 0)
    assert b.counts.precision == pytest.approx(2 / 6)
    assert any("disputed by 2 reviewers" in reason for reason in a.reasons)
    assert any("restricted by a moderator" in reason for reason in b.reasons)
    models = {(row[0], row[1]): (row[2], row[3]) for row in await _outcomes()}
    assert models[(alice.id, "verified")] == ("model-a", "p/1")


async def test_one_dispute_decides_nothing_and_an_outcome_latches() -> None:
    repo = await factories.create_repository()
    alice, bob = await factories.create_account(), await factories.create_account()
    first = await _report(alice, repo, "SQL injection in login")
    canonical = first["findings"][0]["canonical_public_id"]
    await _check(canonical, "disputed", times=1)
    await refresh()
    assert await _outcomes() == []  # one reviewer must not be able to gate anyone

    await _check(canonical, "confirmed", times=3)  # 3 confirmations against 1 dispute: verified
    await refresh()
    assert [row[1] for row in await _outcomes()] == ["verified"]

    # bob finds it again at a new commit: the status falls back to open, alice's outcome stays, bob's duplicate
    # counts nothing
    again = await _report(bob, repo, "SQL injection in login", commit="b" * 40)
    assert again["findings"][0]["canonical_public_id"] == canonical
    await refresh()
    outcomes = await _outcomes()
    assert [(row[0], row[1]) for row in outcomes] == [(alice.id, "verified")]
    assert (await _signal(bob)).counts.decided == 0


async def test_a_sarif_rule_is_attributed_to_its_tool() -> None:
    repo = await factories.create_repository()
    alice = await factories.create_account()
    first = await _report(alice, repo, "Path traversal in upload", model="semgrep 1.2")
    async with db.transaction() as session:  # what the SARIF intake stores per occurrence (app/reports/sarif.py)
        await session.execute(
            text("UPDATE scan_findings SET rule_id = 'python.lang.path-traversal' WHERE public_id = :id"),
            {"id": first["findings"][0]["public_id"]},
        )
    await _check(first["findings"][0]["canonical_public_id"], "confirmed")
    await refresh()
    (row,) = await _outcomes()
    assert (row[4], row[5]) == ("semgrep 1.2", "python.lang.path-traversal")


async def _decided(account: Account, verified: int, disputed: int) -> None:
    """Outcomes recorded as the worker would have (the gate's arithmetic, not the quorum's, is under test)."""
    async with db.transaction() as session:
        for n in range(verified + disputed):
            outcome = "verified" if n < verified else "disputed"
            refusal = (
                await session.execute(
                    text("INSERT INTO report_refusals (account_id, reason) VALUES (:a, 'x') RETURNING id"),
                    {"a": account.id},
                )
            ).scalar_one()
            await session.execute(
                text(
                    "INSERT INTO finding_outcomes (refusal_id, account_id, outcome, reason, decided_at)"
                    " VALUES (:r, :a, :o, 'test', now())"
                ),
                {"r": refusal, "a": account.id, "o": outcome},
            )
        await store_signals(session, [account.id])


async def _gated(account: Account) -> bool:
    async with db.read_session(replica=False) as session:
        value = (
            await session.execute(text("SELECT gated FROM account_signals WHERE account_id = :a"), {"a": account.id})
        ).scalar_one()
    return bool(value)


async def test_the_gate_closes_below_the_floor_once_ten_are_decided_and_never_for_moderators() -> None:
    nine = await factories.create_account()
    await _decided(nine, verified=0, disputed=9)  # (0 + 2) / (9 + 4) = 0.15, but only 9 decided
    assert not await _gated(nine)
    ten = await factories.create_account()
    await _decided(ten, verified=1, disputed=9)  # (1 + 2) / (10 + 4) = 0.21 < 0.3
    assert await _gated(ten)
    fine = await factories.create_account()
    await _decided(fine, verified=3, disputed=7)  # (3 + 2) / 14 = 0.357
    assert not await _gated(fine)
    moderator = await factories.create_account(platform_role="moderator")
    await _decided(moderator, verified=0, disputed=12)
    assert not await _gated(moderator)


async def test_the_maintained_table_equals_a_recompute_from_source() -> None:
    repo = await factories.create_repository()
    accounts = [await factories.create_account() for _ in range(3)]
    for n, account in enumerate(accounts):
        for k in range(3):
            answer = await _report(account, repo, f"Finding {n} {k} in handler")
            if (n + k) % 3 == 0:
                await _check(answer["findings"][0]["canonical_public_id"], "confirmed")
            elif (n + k) % 3 == 1:
                await _check(answer["findings"][0]["canonical_public_id"], "disputed")
        await refresh()  # the worker between facts
    maintained = await _outcomes()
    async with db.transaction() as session:
        await session.execute(text("DELETE FROM finding_outcomes"))
        await session.execute(text("DELETE FROM account_signals"))
    await recompute()
    assert await _outcomes() == maintained
    assert len(maintained) == 6


async def test_precision_rows_need_five_decided_three_accounts_and_no_majority(client: httpx.AsyncClient) -> None:
    empty = (await client.get("/stats/precision.json")).json()
    assert empty == {"by_provenance": [], "by_model": [], "by_tool_rule": []}

    reporters = [await factories.create_account() for _ in range(3)]
    for n, account in enumerate(reporters):  # 2 + 2 + 1 decided findings of model-z: no account above half
        for k in range(2 if n < 2 else 1):
            repo = await factories.create_repository()  # a repository each: the per-repository report rate
            answer = await _report(account, repo, f"Issue {n} {k} in parser", model="model-z", prompt_version="z/1")
            await _check(answer["findings"][0]["canonical_public_id"], "confirmed" if k == 0 else "disputed")
    await refresh()
    shown = (await client.get("/stats/precision.json")).json()
    (row,) = shown["by_model"]
    assert (row["model"], row["prompt_version"], row["decided"], row["verified"]) == ("model-z", "z/1", 5, 3)
    assert row["precision"] == pytest.approx(round(5 / 9, 4))
    assert [r["provenance"] for r in shown["by_provenance"]] == ["agent"]
    page = await client.get("/stats/precision")
    assert page.status_code == 200 and "model-z" in page.text

    # a fourth account with six findings would hold more than half of the row's 11: the row is hidden
    heavy = await factories.create_account()
    for k in range(6):
        repo = await factories.create_repository()
        answer = await _report(heavy, repo, f"Heavy {k} in parser", model="model-z", prompt_version="z/1")
        await _check(answer["findings"][0]["canonical_public_id"], "confirmed")
    await refresh()
    assert (await client.get("/stats/precision.json")).json()["by_model"] == []


async def test_an_account_reads_its_own_signal(client: httpx.AsyncClient) -> None:
    account = await factories.create_account()
    token = await create_token(account.id, ["findings:submit"])
    answer = await client.get("/api/v1/account/signal", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200
    assert answer.json() == {
        "signal": {"precision": 0.5, "decided": 0, "verified": 0, "disputed": 0, "withdrawn": 0, "refused": 0,
                   "gated": False, "reasons": []}
    }  # fmt: skip
    assert "no-store" in answer.headers["cache-control"]
    assert (await client.get("/api/v1/account/signal")).status_code == 401
