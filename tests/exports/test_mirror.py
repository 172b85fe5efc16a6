"""The mirror test (issue 14 "Done when"): a mirror that loads an export and then follows the change feed from the
manifest's `changes_cursor` ends with the same public findings (id, canonical, repository, status) as a fresh
export, across submits, status changes, takedowns and a re-publication in between."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from app.accounts.models import Account
from app.exports import service
from app.moderation import service as moderation
from app.reports.service import submit_report
from tests import factories
from tests.exports.support import records
from tests.reports.support import COMMIT, finding, reach_quorum, report_body

NOTES = "Taken down while the owner is contacted about the disclosure."
OTHER_COMMIT = "b" * 40

Finding = tuple[str, str, str, str]  # finding, canonical, repository, status


class Mirror:
    """What an integrator keeps: public findings by id, and the canonicals' statuses."""

    def __init__(self, export: Path) -> None:
        self.findings: dict[str, tuple[str, str]] = {}
        self.statuses: dict[str, str] = {}
        for record in records(export, "findings.ndjson.gz"):
            self.findings[record["finding"]] = (record["canonical"], record["repository"])
            self.statuses[record["canonical"]] = record["status"]

    def apply(self, entry: dict[str, Any]) -> None:
        kind = entry["kind"]
        if kind == "finding.published" and "canonical" in entry:  # without it: withdrawn since, a later entry says so
            self.findings[entry["finding"]] = (entry["canonical"], entry["repository"])
        elif kind == "finding.status" and "status" in entry:
            self.statuses[entry["canonical"]] = entry["status"]
        elif kind == "finding.withdrawn":
            self.findings.pop(entry["finding"], None)

    async def follow(self, client: httpx.AsyncClient, cursor: str) -> int:
        """Read the feed from `cursor` to its end, a few entries per page as a polling client would."""
        seen = 0
        while True:
            page = await client.get("/api/v1/changes", params={"cursor": cursor, "limit": 3})
            assert page.status_code == 200, page.text
            body = page.json()
            for entry in body["entries"]:
                self.apply(entry)
            seen += len(body["entries"])
            if not body["entries"]:
                return seen
            cursor = body["next_cursor"]

    def public_findings(self) -> set[Finding]:
        return {(f, canonical, repo, self.statuses[canonical]) for f, (canonical, repo) in self.findings.items()}


def exported(directory: Path) -> set[Finding]:
    return {
        (r["finding"], r["canonical"], r["repository"], r["status"]) for r in records(directory, "findings.ndjson.gz")
    }


async def report(
    account: Account, owner: str, titles: list[str], *, commit_sha: str = COMMIT, new_repository: bool = True
) -> dict[str, Any]:
    if new_repository:
        await factories.create_repository(owner, "app")
    body = report_body(
        findings=[finding(title=t, file=f"src/{i}.py") for i, t in enumerate(titles)], commit_sha=commit_sha
    )
    return await submit_report(account, "github.com", owner, "app", body)


async def test_export_plus_feed_equals_a_fresh_export(client: httpx.AsyncClient, tmp_path: Path) -> None:
    submitter = await factories.create_account()
    moderator = await factories.create_account(platform_role="moderator")
    first = await report(submitter, "alpha", ["SQL injection in login", "Open redirect after login"])
    await report(submitter, "beta", ["SQL injection in login"])
    flipped = await report(submitter, "gamma", ["Weak session ids"])
    await report(submitter, "delta", ["SQL injection in login"])
    secrets = await report(submitter, "epsilon", ["Secrets in the build log"])

    snapshot = tmp_path / "export"
    manifest = await service.write_export(snapshot)
    mirror = Mirror(snapshot)
    before = mirror.public_findings()
    assert len(before) == 6

    # in between: a new report (a new finding and one seen again), status changes, takedowns and a re-publication
    await report(
        submitter,
        "alpha",
        ["SQL injection in login", "Path traversal in export"],
        commit_sha=OTHER_COMMIT,
        new_repository=False,
    )
    await report(submitter, "zeta", ["Open redirect after login"])
    await reach_quorum(first["findings"][1]["canonical_public_id"], "confirmed")
    await reach_quorum(secrets["findings"][0]["canonical_public_id"], "fixed")
    await moderation.change_scan_visibility(moderator, flipped["id"], "restricted", "takedown", NOTES)
    await moderation.change_repository_listing(moderator, "github.com", "beta", "app", "quarantined", "takedown", NOTES)
    await moderation.delete_repository(
        "github.com", "delta", "app", actor_id=moderator.id, reason="takedown", notes=NOTES
    )
    await moderation.change_scan_visibility(moderator, flipped["id"], "public_summary", "partial", NOTES)
    await moderation.change_scan_visibility(moderator, flipped["id"], "public", "appeal upheld", NOTES)

    assert await mirror.follow(client, manifest["changes_cursor"]) > 0
    fresh = tmp_path / "fresh"
    await service.write_export(fresh)
    expected = exported(fresh)

    assert mirror.public_findings() == expected
    # and the run did exercise every kind of change: the set moved in each way
    repositories = {repo for _, _, repo, _ in expected}
    assert "github.com/beta/app" not in repositories and "github.com/delta/app" not in repositories
    assert {"github.com/zeta/app", "github.com/gamma/app"} <= repositories
    assert {status for *_, status in expected} == {"open", "verified", "fixed"}
    assert len(expected) == 7 and expected != before
