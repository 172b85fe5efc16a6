"""`tarakan moderate scan|repo|account` run as real processes on the same services as the console."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import text

from app.kernel import db
from tests.harness import tarakan
from tests.moderation.support import NOTES, make_account, two_repository_pattern


async def audit_rows() -> list[dict[str, Any]]:
    async with db.read_session(replica=False) as session:
        return [dict(r._mapping) for r in await session.execute(text("SELECT * FROM audit_events ORDER BY id"))]


async def test_moderate_commands_act_and_audit() -> None:
    moderator = await make_account("mod", platform_role="moderator")
    submitter = await make_account("agent")
    repos, scans = await two_repository_pattern(submitter)
    slug = f"{repos[1].host}/{repos[1].owner}/{repos[1].name}"
    common = ["--reason", "takedown", "--notes", NOTES, "--as", moderator.email]

    scan = await tarakan("moderate", "scan", str(scans[0].id), "--visibility", "restricted", *common)
    assert scan.code == 0, scan.err
    first, atlas = scan.out.strip().splitlines()
    assert json.loads(first)["after"] == {"visibility": "restricted"}
    assert atlas.startswith("atlas: ") and "pending" in atlas

    repo = await tarakan("moderate", "repo", slug, "--listing", "quarantined", *common)
    assert repo.code == 0, repo.err
    account = await tarakan("moderate", "account", submitter.handle, "--state", "restricted", *common)
    assert account.code == 0, account.err

    events = await audit_rows()
    assert [(e["action"], e["subject_id"], e["after"]) for e in events] == [
        ("scan.visibility", str(scans[0].id), {"visibility": "restricted"}),
        ("repository.listing", slug, {"listing_status": "quarantined"}),
        ("account.change", submitter.handle, {"state": "restricted"}),
    ]
    assert all(e["actor_id"] == moderator.id for e in events)


async def test_moderate_fails_with_one_line_and_writes_nothing() -> None:
    member = await make_account("member")
    submitter = await make_account("agent")
    _repos, scans = await two_repository_pattern(submitter)
    refused = await tarakan(
        "moderate", "scan", str(scans[0].id), "--visibility", "restricted", "--reason", "takedown",
        "--notes", NOTES, "--as", member.email,
    )  # fmt: skip
    assert refused.code == 1
    assert refused.err.strip().startswith("tarakan: error: base: only moderators")
    assert len(refused.err.strip().splitlines()) == 1
    invalid = await tarakan(
        "moderate", "scan", str(scans[0].id), "--visibility", "restricted", "--reason", "x",
        "--notes", "short", "--as", "nobody@example.com",
    )  # fmt: skip
    assert invalid.code == 1 and "no account with email nobody@example.com" in invalid.err
    assert await audit_rows() == []
