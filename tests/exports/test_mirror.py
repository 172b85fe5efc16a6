"""The mirror test (issue 14 "Done when"): a mirror that loads an export and then follows the change feed from the
manifest's `changes_cursor` ends with the same public findings (id, canonical, repository, status, the maintainers'
current statement) as a fresh export, across submits, status changes, statements and their hides, takedowns and a
re-publication in between."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

from app.accounts.models import Account
from app.exports import service
from app.kernel import db
from app.kernel.intake import off_loop
from app.maintainers.models import RepositoryMaintainer
from app.maintainers.statements import prepare_statement, record_statement
from app.moderation import service as moderation
from app.registry.models import Repository
from app.reports.service import submit_report
from tests import factories
from tests.exports.support import records
from tests.reports.support import COMMIT, finding, reach_quorum, report_body

NOTES = "Taken down while the owner is contacted about the disclosure."
OTHER_COMMIT = "b" * 40

Said = tuple[str, str | None] | None  # a maintainer statement's status and justification, or none
Finding = tuple[str, str, str, str, Said]  # finding, canonical, repository, status, statement


def said(statement: dict[str, Any] | None) -> Said:
    return None if statement is None else (statement["status"], statement["justification"])


class Mirror:
    """What an integrator keeps: public findings by id, and the canonicals' statuses."""

    def __init__(self, export: Path) -> None:
        self.findings: dict[str, tuple[str, str]] = {}
        self.statuses: dict[str, str] = {}
        self.statements: dict[str, Said] = {}
        for record in records(export, "findings.ndjson.gz"):
            self.findings[record["finding"]] = (record["canonical"], record["repository"])
            self.statuses[record["canonical"]] = record["status"]
            self.statements[record["canonical"]] = said(record["maintainer_statement"])

    def apply(self, entry: dict[str, Any]) -> None:
        kind = entry["kind"]
        if kind == "finding.published" and "canonical" in entry:  # without it: withdrawn since, a later entry says so
            self.findings[entry["finding"]] = (entry["canonical"], entry["repository"])
        elif kind == "finding.status" and "status" in entry:
            self.statuses[entry["canonical"]] = entry["status"]
        elif kind == "finding.withdrawn":
            self.findings.pop(entry["finding"], None)
        elif kind == "finding.statement":  # the finding's current statement; without a status: none (or hidden)
            self.statements[entry["canonical"]] = (
                (entry["status"], entry["justification"]) if "status" in entry else None
            )

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
        return {
            (f, canonical, repo, self.statuses[canonical], self.statements.get(canonical))
            for f, (canonical, repo) in self.findings.items()
        }


def exported(directory: Path) -> set[Finding]:
    return {
        (r["finding"], r["canonical"], r["repository"], r["status"], said(r["maintainer_statement"]))
        for r in records(directory, "findings.ndjson.gz")
    }


async def maintainer_of(owner: str) -> Account:
    """A verified maintainer of github.com/{owner}/app (the row the claim service writes on verification)."""
    account = await factories.create_account()
    async with db.transaction() as session:
        repository_id = (
            await session.execute(select(Repository.id).where(Repository.owner == owner, Repository.name == "app"))
        ).scalar_one()
        session.add(RepositoryMaintainer(repository_id=repository_id, account_id=account.id))
    return account


async def state(maintainer: Account, canonical: str, status: str, **fields: str) -> int:
    statement = await off_loop(lambda budget: prepare_statement({"status": status, **fields}, budget))
    return (await record_statement(maintainer.id, canonical, statement)).id


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
    alpha_keeper, gamma_keeper = await maintainer_of("alpha"), await maintainer_of("gamma")
    alpha_first = first["findings"][0]["canonical_public_id"]
    await state(alpha_keeper, alpha_first, "not_affected", justification="component_not_present")

    snapshot = tmp_path / "export"
    manifest = await service.write_export(snapshot)
    mirror = Mirror(snapshot)
    before = mirror.public_findings()
    assert len(before) == 6
    assert {statement for *_, statement in before} == {None, ("not_affected", "component_not_present")}

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
    # statements in between: a newer one on alpha hidden (the earlier one is current again), one on a finding that
    # is taken down and published again, one on a finding that stays up
    newer = await state(alpha_keeper, alpha_first, "affected", action_statement="Upgrade to 2.0.")
    await state(gamma_keeper, flipped["findings"][0]["canonical_public_id"], "under_investigation")
    await state(alpha_keeper, first["findings"][1]["canonical_public_id"], "fixed", fixed_in="c" * 40)
    await moderation.change_statement_visibility(moderator, newer, "hidden", "not the maintainers' view", NOTES)
    await reach_quorum(secrets["findings"][0]["canonical_public_id"], "fixed")
    await moderation.change_scan_visibility(moderator, flipped["id"], "restricted", "takedown", NOTES)
    await moderation.change_repository_listing(moderator, "github.com", "beta", "app", "quarantined", "takedown", NOTES)
    await moderation.delete_repository(
        "github.com", "delta", "app", actor_id=moderator.id, reason="takedown", notes=NOTES
    )
    await moderation.change_scan_visibility(moderator, flipped["id"], "public_summary", "partial", NOTES)
    await moderation.change_scan_visibility(moderator, flipped["id"], "public", "appeal upheld", NOTES)

    assert await mirror.follow(client, manifest.changes_cursor) > 0
    fresh = tmp_path / "fresh"
    await service.write_export(fresh)
    expected = exported(fresh)

    assert mirror.public_findings() == expected
    # and the run did exercise every kind of change: the set moved in each way
    repositories = {repo for _, _, repo, _, _ in expected}
    assert "github.com/beta/app" not in repositories and "github.com/delta/app" not in repositories
    assert {"github.com/zeta/app", "github.com/gamma/app"} <= repositories
    assert {status for *_, status, _ in expected} == {"open", "verified", "fixed"}
    assert {statement for *_, statement in expected} == {
        None,
        ("not_affected", "component_not_present"),
        ("under_investigation", None),
        ("fixed", None),
    }
    assert len(expected) == 7 and expected != before
