"""Assimilation across reports (docs/domain.md §2.6-§2.7): one canonical per fingerprint, dispositions, counters,
first/last seen commits, the legacy v1 upgrade, `updated_at` discipline, and dirty keys in the same transaction."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from app.accounts.models import Account
from app.kernel import db
from app.registry.models import Repository
from app.reports.assimilation import assimilate_scan
from app.reports.checks import record_check
from app.reports.counters import refresh_canonical_counters
from app.reports.finding_memory import fingerprint, legacy_normalize, pattern_key
from app.reports.models import Scan
from app.reports.quorum import recompute_canonical_status
from app.reports.service import submit_report
from tests import factories
from tests.reports.support import finding, insert_v1_finding, report_body, row_counts
from tests.sql import execute, scalar

SHA_A, SHA_B, SHA_C = "a" * 40, "b" * 40, "c" * 40


async def submit(account: Account, repo: Repository, findings: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    return await submit_report(account, repo.host, repo.owner, repo.name, report_body(findings=findings, **kw))


async def canonicals(repo: Repository) -> list[dict[str, Any]]:
    async with db.read_session(replica=False) as session:
        rows = await session.execute(
            text("SELECT * FROM canonical_findings WHERE repository_id = :id ORDER BY id"), {"id": repo.id}
        )
        return [dict(r) for r in rows.mappings()]


async def test_path_and_title_variants_link_to_one_canonical() -> None:
    alice = await factories.create_account(state="active")
    bob = await factories.create_account(state="active")
    repo = await factories.create_repository()
    variants = [
        (alice, "lib/auth.ex", "SQL injection in login", "model-a"),
        (alice, "./lib/auth.ex", "Verified: SQL injection in login.", "model-b"),
        (bob, "lib//auth.ex", "Likely: SQL Injection in login", "model-a"),
        (bob, "Lib/Auth.ex", "sql injection in login", "model-a"),
    ]
    results = []
    for i, (account, path, title, model) in enumerate(variants):
        results.append(
            await submit(
                account,
                repo,
                [finding(file=path, title=title, line_end=10 + i)],  # line_end plays no role
                model=model,
                commit_sha=SHA_A,
            )
        )
    ids = {r["findings"][0]["canonical_public_id"] for r in results}
    assert len(ids) == 1
    dispositions = [r["findings"][0]["disposition"] for r in results]
    assert dispositions == ["new", "matches_existing", "matches_existing", "matches_existing"]
    [canonical] = await canonicals(repo)
    assert canonical["fingerprint"] == fingerprint("lib/auth.ex", 10, "SQL injection in login")
    assert canonical["pattern_key"] == pattern_key("SQL injection in login")
    # copied from the first occurrence and never updated afterwards
    assert (canonical["file_path"], canonical["title"]) == ("lib/auth.ex", "SQL injection in login")
    assert canonical["detections_count"] == 4
    assert canonical["distinct_submitters_count"] == 2
    assert canonical["distinct_models_count"] == 2


async def test_different_line_or_title_makes_a_new_canonical() -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    result = await submit(
        account,
        repo,
        [
            finding(line_start=10),
            finding(line_start=11, line_end=11),
            finding(title="XSS in template"),
            finding(line_start=10, line_end=40),  # same fingerprint as the first, in the same report
        ],
    )
    dispositions = [f["disposition"] for f in result["findings"]]
    # an earlier occurrence in the same report counts as a prior detection
    assert dispositions == ["new", "new", "new", "matches_existing"]
    rows = await canonicals(repo)
    assert len(rows) == 3
    assert rows[0]["detections_count"] == 1  # two occurrences, one report


async def test_canonicals_are_per_repository() -> None:
    account = await factories.create_account(state="active")
    one, two = await factories.create_repository(), await factories.create_repository()
    a = await submit(account, one, [finding()])
    b = await submit(account, two, [finding()])
    assert a["findings"][0]["canonical_public_id"] != b["findings"][0]["canonical_public_id"]
    assert a["findings"][0]["pattern_key"] == b["findings"][0]["pattern_key"]
    assert b["findings"][0]["disposition"] == "new"


async def test_agent_dispositions_are_recomputed() -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    first = await submit(account, repo, [finding(disposition="regression")])
    assert first["findings"][0]["disposition"] == "new"  # never seen: new whatever the agent says
    second = await submit(account, repo, [finding(disposition="not_reproduced")])
    assert second["findings"][0]["disposition"] == "matches_existing"
    third = await submit(account, repo, [finding(disposition="regression")])
    assert third["findings"][0]["disposition"] == "regression"  # an agent-sent regression on a known finding stays


async def fix_by_quorum(canonical_public_id: str, commit_sha: str) -> None:
    for _ in range(2):
        reviewer = await factories.create_account(state="active", trust_tier="reviewer")
        await record_check(
            reviewer,
            canonical_public_id,
            {"commit_sha": commit_sha, "verdict": "fixed", "provenance": "human", "notes": "The fix landed, verified."},
        )


async def test_redetecting_a_fixed_finding_is_a_regression_and_reopens_it() -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    first = await submit(account, repo, [finding()], commit_sha=SHA_A)
    canonical_id = first["findings"][0]["canonical_public_id"]
    await fix_by_quorum(canonical_id, SHA_A)
    [row] = await canonicals(repo)
    assert row["status"] == "fixed" and row["verified_at"] is not None
    again = await submit(account, repo, [finding()], commit_sha=SHA_B)
    assert again["findings"][0]["disposition"] == "regression"
    [row] = await canonicals(repo)
    # last seen moved to the new commit: the tally resets to its (absent) checks
    assert (row["first_seen_commit_sha"], row["last_seen_commit_sha"]) == (SHA_A, SHA_B)
    assert (row["status"], row["confirmations_count"], row["disputes_count"], row["verified_at"]) == (
        "open",
        0,
        0,
        None,
    )


async def test_counters_cover_every_visibility_and_order_by_report_time() -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    first = await submit(account, repo, [finding()], commit_sha=SHA_A)
    async with db.transaction() as session:
        await session.execute(text("UPDATE scans SET visibility = 'restricted' WHERE id = :id"), {"id": first["id"]})
    second = await submit(account, repo, [finding()], commit_sha=SHA_B)
    [row] = await canonicals(repo)
    assert row["detections_count"] == 2  # the restricted report still counts
    assert (row["first_seen_commit_sha"], row["last_seen_commit_sha"]) == (SHA_A, SHA_B)
    # order is by report time, not by id: backdate the second report before the first
    async with db.transaction() as session:
        await session.execute(
            text("UPDATE scans SET inserted_at = inserted_at - interval '1 day' WHERE id = :id"), {"id": second["id"]}
        )
        assert await refresh_canonical_counters(session, row["id"])
    [row] = await canonicals(repo)
    assert (row["first_seen_commit_sha"], row["last_seen_commit_sha"]) == (SHA_B, SHA_A)


async def test_updated_at_moves_only_on_real_change() -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    await submit(account, repo, [finding()], commit_sha=SHA_A)
    [created] = await canonicals(repo)
    assert created["updated_at"] == created["inserted_at"]
    async with db.transaction() as session:  # a no-op recompute
        assert not await refresh_canonical_counters(session, created["id"])
        assert not await recompute_canonical_status(session, created["id"])
    [unchanged] = await canonicals(repo)
    assert unchanged["updated_at"] == created["updated_at"]
    await submit(account, repo, [finding()], commit_sha=SHA_A)  # re-detection at the same commit
    [redetected] = await canonicals(repo)
    assert redetected["detections_count"] == 2
    assert redetected["updated_at"] > created["updated_at"]
    assert redetected["inserted_at"] == created["inserted_at"]


async def test_legacy_fingerprint_is_upgraded_and_reused() -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    title = "Verified: SQL injection in login."
    old_scan = await factories.create_scan(repo, account, commit_sha=SHA_A)
    canonical_id = await insert_v1_finding(
        repo.id, old_scan.id, SHA_A, title, path="lib/auth.ex", line_start=10, line_end=12,
        key=pattern_key(legacy_normalize(title)), age_days=30,
    )  # fmt: skip
    result = await submit(account, repo, [finding(title=title)], commit_sha=SHA_B)
    [row] = await canonicals(repo)
    assert row["id"] == canonical_id
    assert row["fingerprint"] == fingerprint("lib/auth.ex", 10, title)
    assert row["pattern_key"] == pattern_key(title) == result["findings"][0]["pattern_key"]
    assert result["findings"][0]["disposition"] == "matches_existing"
    assert row["detections_count"] == 2
    assert row["title"] == title and row["description"] == "old"


async def test_assimilate_returns_the_touched_pattern_keys() -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    scan = await factories.create_scan(repo, account, commit_sha=SHA_C)
    async with db.transaction() as session:
        for position, title in enumerate(["XSS in template", "XSS in template", "Open redirect after login"]):
            await session.execute(
                text(
                    "INSERT INTO scan_findings (scan_id, position, file_path, line_start, line_end, severity, title,"
                    " description) VALUES (:s, :p, :f, 1, 1, 'low', :t, 'd')"
                ),
                {"s": scan.id, "p": position, "f": f"a{position}.py", "t": title},
            )
        loaded = await session.get(Scan, scan.id)
        assert loaded is not None
        keys = await assimilate_scan(session, loaded)
    assert keys == {pattern_key("XSS in template"), pattern_key("Open redirect after login")}
    assert len(await canonicals(repo)) == 3


async def dirty_keys() -> dict[str, str]:
    async with db.read_session(replica=False) as session:
        rows = await session.execute(text("SELECT pattern_key, reason FROM infestation_dirty_keys"))
        return {str(k): str(r) for k, r in rows}


async def test_submit_marks_its_keys_dirty_in_the_same_transaction() -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    await submit(account, repo, [finding(), finding(title="XSS in template")])
    assert await dirty_keys() == {
        pattern_key("SQL injection in login"): "assimilate",
        pattern_key("XSS in template"): "assimilate",
    }


async def test_a_submit_whose_dirty_write_fails_stores_nothing() -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    await execute(
        "CREATE FUNCTION refuse_dirty() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN RAISE EXCEPTION 'dirty keys unavailable'; END $$"
    )
    await execute(
        "CREATE TRIGGER refuse_dirty BEFORE INSERT ON infestation_dirty_keys FOR EACH ROW EXECUTE FUNCTION refuse_dirty()"
    )
    try:
        with pytest.raises(DBAPIError, match="dirty keys unavailable"):
            await submit(account, repo, [finding()])
    finally:
        await execute("DROP TRIGGER refuse_dirty ON infestation_dirty_keys")
        await execute("DROP FUNCTION refuse_dirty()")
    assert all(count == 0 for count in (await row_counts()).values())
    assert await scalar("SELECT scan_count FROM repositories") == 0
