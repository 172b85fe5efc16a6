"""The evidence gate at submission (issue 36 items 3 and 4; docs/domain.md "Evidence at the commit"): a report whose
commit is not in its repository's default-branch history, or whose finding's file or lines are not at that commit,
is refused with a 422 naming the field and leaves one `report_refusals` row; a report the forge confirms is stored
as before with each finding's anchor; with the forge down it is stored pending, off the public record."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from app.forge.demo import DemoForge
from app.forge.lines import anchor, line_digests
from app.moderation.service import delete_repository
from tests import factories
from tests.reports.support import finding, report_body
from tests.reports.test_reports_api import post, reports_url, token_for
from tests.sql import rows, scalar
from tests.statements import statements_sent

SHA = "1" * 40
FORK_SHA = "2" * 40
SOURCE = (
    b"import os\n\ndef login(user):\n    query = 'SELECT * FROM users WHERE name = ' + user\n    return run(query)\n"
)
WHEN = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture
async def gated(forge: DemoForge, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """EVIDENCE_CHECK=gate; acme/widget registered and on the forge with SHA on main holding lib/auth.py, and a
    fork's commit FORK_SHA served under its name but not in main's history."""
    monkeypatch.setenv("EVIDENCE_CHECK", "gate")
    repo = await factories.create_repository("acme", "widget")
    forge.add_repository("github.com", "acme", "widget")
    forge.add_commit("github.com", "acme", "widget", SHA, {"lib/auth.py": SOURCE, "README": b"hi\n"}, WHEN)
    forge.add_commit("github.com", "acme", "widget", FORK_SHA, {"lib/auth.py": SOURCE}, on_default_branch=False)
    account = await factories.create_account(state="active")
    return {"repo": repo, "account": account, "headers": await token_for(account)}


def _body(*findings: dict[str, Any], sha: str = SHA, **envelope: Any) -> dict[str, Any]:
    return report_body(list(findings) or [finding(file="lib/auth.py", line_start=3, line_end=5)], commit_sha=sha,
                       **envelope)  # fmt: skip


async def _refusals() -> list[dict[str, Any]]:
    return await rows("SELECT account_id, repository_id, reason FROM report_refusals ORDER BY id")


async def _refused(client: httpx.AsyncClient, gated: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    answer = await post(client, reports_url(gated["repo"]), gated["headers"], body)
    assert answer.status_code == 422, answer.text
    assert await scalar("SELECT count(*) FROM scans") == 0
    assert await scalar("SELECT count(*) FROM scan_findings") == 0
    assert await scalar("SELECT count(*) FROM canonical_findings") == 0
    errors: dict[str, Any] = answer.json()["errors"]
    return errors


async def test_a_commit_the_forge_does_not_know_is_refused_naming_commit_sha(
    client: httpx.AsyncClient, gated: dict[str, Any]
) -> None:
    errors = await _refused(client, gated, _body(sha="3" * 40))
    assert errors == {"commit_sha": ["not found in github.com/acme/widget"]}
    [refusal] = await _refusals()
    assert (refusal["account_id"], refusal["repository_id"]) == (gated["account"].id, gated["repo"].id)
    assert refusal["reason"] == "commit_sha: not found in github.com/acme/widget"


async def test_a_forks_commit_served_under_the_parents_name_is_refused(
    client: httpx.AsyncClient, gated: dict[str, Any]
) -> None:
    errors = await _refused(client, gated, _body(sha=FORK_SHA))
    assert errors == {"commit_sha": ["not found in github.com/acme/widget (not in the history of main)"]}


async def test_a_file_not_at_the_commit_and_lines_past_its_end_are_refused_naming_the_field(
    client: httpx.AsyncClient, gated: dict[str, Any]
) -> None:
    real = finding(file="lib/auth.py", line_start=3, line_end=5, title="Real")
    invented = finding(file="lib/session.py", line_start=1, line_end=2, title="Invented")
    errors = await _refused(client, gated, _body(real, invented))
    assert errors == {"findings[1].file": ["not found in github.com/acme/widget at 1111111"]}
    past = finding(file="lib/auth.py", line_start=4, line_end=90, title="Past the end")
    errors = await _refused(client, gated, _body(real, past))
    assert errors == {"findings[1].line_end": ["line 90 is past the end (5 lines)"]}
    assert [r["reason"] for r in await _refusals()] == [
        "findings[1].file: not found in github.com/acme/widget at 1111111",
        "findings[1].line_end: line 90 is past the end (5 lines)",
    ]


async def test_a_sarif_result_whose_file_is_not_there_is_named_by_its_location(
    client: httpx.AsyncClient, gated: dict[str, Any]
) -> None:
    result: dict[str, Any] = {
        "ruleId": "py/sql-injection",
        "message": {"text": "SQL built from user input"},
        "locations": [{"physicalLocation": {"artifactLocation": {"uri": "lib/missing.py"},
                                            "region": {"startLine": 2}}}],
    }  # fmt: skip
    log: dict[str, Any] = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "CodeQL", "version": "2.19.0"}},
           "versionControlProvenance": [{"revisionId": SHA}], "results": [result]}]}  # fmt: skip
    sarif = {**gated["headers"], "content-type": "application/sarif+json"}
    answer = await client.post(reports_url(gated["repo"]), json=log, headers=sarif)
    assert answer.status_code == 422, answer.text
    assert answer.json()["errors"] == {
        "runs[0].results[0].locations[0].physicalLocation.artifactLocation.uri": [
            "not found in github.com/acme/widget at 1111111"
        ]
    }
    # the same log citing the file that is there: stored, its ruleId kept
    result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] = "lib/auth.py"
    stored = await client.post(reports_url(gated["repo"]), json=log, headers=sarif)
    assert stored.status_code == 201, stored.text
    assert await scalar("SELECT rule_id FROM scan_findings") == "py/sql-injection"


async def test_confirmed_findings_are_published_with_their_anchor_and_the_commit_date(
    client: httpx.AsyncClient, gated: dict[str, Any]
) -> None:
    lined = finding(file="lib/auth.py", line_start=3, line_end=5, title="Lined")
    whole = finding(file="README", line_start=None, line_end=None, title="Whole file")
    answer = await post(client, reports_url(gated["repo"]), gated["headers"], _body(lined, whole))
    assert answer.status_code == 201, answer.text
    data = answer.json()
    expected = anchor(line_digests(SOURCE), 3, 5)
    assert expected is not None
    assert [f["evidence"] for f in data["findings"]] == [
        {"state": "confirmed", "commit": SHA, "anchor": expected},
        {"state": "confirmed", "commit": SHA, "anchor": None},
    ]
    assert data["disclosed"] is True and all(f["canonical_public_id"] for f in data["findings"])
    assert datetime.fromisoformat(data["commit_committed_at"]) == WHEN
    stored = await rows("SELECT evidence_state, anchor, published_at IS NOT NULL AS published FROM scan_findings "
                        "ORDER BY position")  # fmt: skip
    assert stored == [
        {"evidence_state": "confirmed", "anchor": expected, "published": True},
        {"evidence_state": "confirmed", "anchor": None, "published": True},
    ]
    assert await scalar("SELECT published_at IS NOT NULL FROM scans") is True
    page = await client.get(f"/findings/{data['findings'][0]['public_id']}")
    assert page.status_code == 200


async def test_reports_on_one_commit_cost_one_request_per_file_and_a_cache_hit_writes_nothing(
    client: httpx.AsyncClient, gated: dict[str, Any], forge: DemoForge
) -> None:
    body = _body(finding(file="lib/auth.py", line_start=3, line_end=5, title="One"),
                 finding(file="README", line_start=1, line_end=1, title="Two"))  # fmt: skip
    scanner = await token_for(await factories.create_account(state="active", platform_role="moderator"))  # no quota
    for n in range(20):
        answer = await post(client, reports_url(gated["repo"]), scanner, body | {"run_id": f"run-{n}"})
        assert answer.status_code == 201, answer.text
    raw = forge.requests("github.com", "/raw/")
    assert sorted(a.path.rsplit("/", 1)[-1] for a in raw) == ["README", "auth.py"]
    assert len(forge.requests("github.com", "/compare/")) == 1
    assert await scalar("SELECT count(*) FROM forge_files") == 2
    # the twenty-first: its transaction as lean as without the gate (4); the gate asks neither the forge nor the
    # caches (what they hold of this commit is remembered for a minute: app.reports.evidence._Memo)
    with statements_sent() as statements:
        answer = await post(client, reports_url(gated["repo"]), scanner, body | {"run_id": "run-20"})
    assert answer.status_code == 201, answer.text
    assert not [s for s in statements if "forge_" in s or "report_refusals" in s]
    assert len(statements) <= 4, "\n---\n".join(statements)
    assert len(forge.requests()) == 5  # once each: the repository (its default branch), compare, commit, 2 raw


async def test_a_name_that_means_another_repository_since_the_check_stores_the_report_pending(
    client: httpx.AsyncClient, gated: dict[str, Any]
) -> None:
    assert (await post(client, reports_url(gated["repo"]), gated["headers"], _body(run_id="a"))).status_code == 201
    # a moderator deletes acme/widget and it is registered again: the same name, another repository, whose commit
    # nothing has checked yet (what the gate remembered of the old one must not confirm it)
    moderator = await factories.create_account(state="active", platform_role="moderator")
    await delete_repository("github.com", "acme", "widget", actor_id=moderator.id, reason="spam")
    again = await factories.create_repository("acme", "widget")
    answer = await post(client, reports_url(again), gated["headers"], _body(run_id="b"))
    assert answer.status_code == 201, answer.text
    assert answer.json()["findings"][0]["evidence"]["state"] == "pending"


@pytest.mark.parametrize("trouble", ["down", "slow", "failing"])
async def test_with_the_forge_unable_to_answer_the_report_is_stored_pending_and_off_the_record(
    client: httpx.AsyncClient, gated: dict[str, Any], forge: DemoForge, monkeypatch: pytest.MonkeyPatch, trouble: str
) -> None:
    monkeypatch.setenv("FORGE_BUDGET_SECONDS", "0.4")
    if trouble == "down":
        forge.down()
    elif trouble == "slow":
        forge.slow("github.com", 1.0)
    else:
        forge.fail("github.com", 503)
    body = _body(run_id="pending-1")
    answer = await post(client, reports_url(gated["repo"]), gated["headers"], body)
    assert answer.status_code == 201, answer.text
    data = answer.json()
    assert data["disclosed"] is False
    [only] = data["findings"]
    assert only["evidence"] == {"state": "pending", "commit": SHA, "anchor": None}
    assert only["canonical_public_id"] is None
    scan = await rows("SELECT published_at, evidence_next_at - now() AS due FROM scans")
    assert scan[0]["published_at"] is None and 20 < scan[0]["due"].total_seconds() <= 30
    stored = await rows("SELECT evidence_state, published_at, canonical_finding_id FROM scan_findings")
    assert stored == [{"evidence_state": "pending", "published_at": None, "canonical_finding_id": None}]
    assert await scalar("SELECT count(*) FROM canonical_findings") == 0
    assert await scalar("SELECT count(*) FROM report_refusals") == 0
    # not public: its finding's page, the repository's twin
    assert (await client.get(f"/findings/{only['public_id']}")).status_code == 404
    assert only["public_id"] not in (await client.get("/repos/github.com/acme/widget.json")).text
    forge.up()
    # the same run again (a retry after a lost answer): the stored pending report, states and all
    again = await post(client, reports_url(gated["repo"]), gated["headers"], body)
    assert again.status_code == 200, again.text
    assert again.json()["findings"][0]["evidence"]["state"] == "pending"
    assert again.json()["disclosed"] is False


async def test_with_the_gate_off_nothing_asks_the_forge_and_findings_are_unchecked(
    client: httpx.AsyncClient, gated: dict[str, Any], forge: DemoForge, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVIDENCE_CHECK", "off")
    answer = await post(client, reports_url(gated["repo"]), gated["headers"], _body(finding(file="lib/nowhere.py")))
    assert answer.status_code == 201, answer.text
    assert answer.json()["findings"][0]["evidence"]["state"] == "unchecked"
    assert forge.requests() == []


def test_the_memo_holds_two_hundred_runs_of_five_files_of_a_thousand_lines_and_drops_the_least_recent() -> None:
    """Many agents' runs at once (the capacity bench's 200 commits, reports round-robin): each commit's files stay
    remembered between its reports; past the budget the least recently used commit goes first."""
    from app.reports import evidence as ev

    digests = line_digests(b"".join(b"x = %d\n" % i for i in range(1000)))
    memo = ev._Memo(ev.MEMO_BYTES)
    paths = [f"cap/file_{i}.py" for i in range(5)]

    def run(k: int) -> tuple[str, ...]:
        return ("github.com", "acme", f"repo-{k}", f"{k:040x}")

    for turn in range(2):
        for k in range(200):
            assert (memo.recall(run(k), paths) is not None) == (turn == 1)
            known = ev._Commit("confirmed", WHEN, files={p: ev._File(True, digests) for p in paths})
            memo.keep(run(k), k, known)
    k = 200
    while memo.recall(run(0), paths) is not None:
        memo.keep(run(k), k, ev._Commit("confirmed", WHEN, files={p: ev._File(True, digests) for p in paths}))
        k += 1
    assert memo.recall(run(1), paths) is not None and memo.bytes <= ev.MEMO_BYTES
