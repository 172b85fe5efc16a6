"""Observations (issue 36 item 5): is the code still there? A loopback forge in GitHub's shapes holds the commits;
`tarakan evidence observe` and the daily run read the default branch's head and keep each finding's ledger."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
import pytest

from app.evidence.observe import observe
from app.exports import service as exports
from app.forge import lines
from app.forge.demo import DemoForge
from app.kernel import db
from app.record import changes
from app.registry.models import Repository
from app.reports.models import Scan, ScanFinding
from jobs.worker import observe_job
from tests.exports.support import records
from tests.factories import create_account, create_canonical, create_occurrence, create_repository, create_scan, sha
from tests.harness import tarakan
from tests.moderation.support import act_as
from tests.sql import execute, rows, scalar

ROOT = Path(__file__).resolve().parents[2]
OWNER, NAME = "acme", "widget"
C1, C2 = sha("c1"), sha("c2")


class GitHub:
    """The loopback forge (app.forge.demo) as github.com holding acme/widget: commits off the branch until `head`."""

    def __init__(self, forge: DemoForge, branch: str) -> None:
        self.forge = forge
        forge.add_repository("github.com", OWNER, NAME, default_branch=branch)

    def commit(self, sha_: str, files: dict[str, str]) -> None:
        encoded = {path: body.encode() for path, body in files.items()}
        self.forge.add_commit("github.com", OWNER, NAME, sha_, encoded, on_default_branch=False)

    def head(self, sha_: str, branch: str = "main") -> None:
        self.forge.set_head("github.com", OWNER, NAME, branch, sha_)

    def asked(self) -> int:
        return len(self.forge.requests())


@pytest.fixture
def gated(forge: DemoForge, monkeypatch: pytest.MonkeyPatch) -> DemoForge:
    monkeypatch.setenv("EVIDENCE_CHECK", "gate")
    monkeypatch.setenv("FORGE_REQUESTS_PER_SECOND", "1000")  # the shared rate is the forge tests' business
    monkeypatch.setenv("FORGE_BURST", "1000")
    return forge


@pytest.fixture
def github(gated: DemoForge) -> GitHub:
    return GitHub(gated, "main")


async def _repository(default_branch: str | None = "main") -> Repository:
    repository = await create_repository(OWNER, NAME)
    await execute("UPDATE repositories SET default_branch = :b WHERE id = :id", b=default_branch, id=repository.id)
    return repository


async def _finding(
    repository: Repository, scan: Scan, path: str, line: int | None, *, span: int = 1, anchor: str | None = None
) -> ScanFinding:
    canonical = await create_canonical(repository, f"finding in {path}", file_path=path, line_start=line)
    occurrence = await create_occurrence(scan, canonical)
    end = None if line is None else line + span - 1
    await execute(
        "UPDATE scan_findings SET line_end = :end, anchor = :a WHERE id = :id", end=end, a=anchor, id=occurrence.id
    )
    return occurrence


async def _announce(scan: Scan) -> None:
    """The report's findings published in the feed, as the report path does."""
    async with db.transaction() as session:
        await changes.sync_scan(session, scan.id)


async def _ledger(occurrence: ScanFinding) -> list[dict[str, Any]]:
    return list(
        await scalar("SELECT observations FROM canonical_findings WHERE id = :id", id=occurrence.canonical_finding_id)
    )


async def _canonical_public_id(occurrence: ScanFinding) -> str:
    return str(
        await scalar("SELECT public_id FROM canonical_findings WHERE id = :id", id=occurrence.canonical_finding_id)
    )


async def _observed_entries(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    page = (await client.get("/api/v1/changes", params={"limit": 1000})).json()
    return [e for e in page["entries"] if e["kind"] == "finding.observed"]


A_PY = "import os\n\nrun(os.environ['CMD'])\n"
B_PY = "def f(x):\n    eval(x)\n    return x\n"
D_PY = "x = 1\npickle.loads(data)\n"


async def test_present_moved_and_absent_at_the_default_branch_head(
    github: GitHub, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    repository = await _repository()
    scan = await create_scan(repository, await create_account(), commit_sha=C1)
    digests = {p: lines.line_digests(body.encode()) for p, body in {"a.py": A_PY, "b.py": B_PY}.items()}
    a = await _finding(repository, scan, "a.py", 3, anchor=lines.anchor(digests["a.py"], 3, 3))
    b = await _finding(repository, scan, "b.py", 2, span=2, anchor=lines.anchor(digests["b.py"], 2, 3))
    c = await _finding(repository, scan, "c.py", 1)
    d = await _finding(repository, scan, "d.py", 2)  # stored before the gate: no anchor, computed from its commit
    e = await _finding(repository, scan, "e.py", None)  # no lines: the file is the evidence
    await _announce(scan)
    github.commit(C1, {"a.py": A_PY, "b.py": B_PY, "c.py": "secret = 'x'\n", "d.py": D_PY, "e.py": "\n"})
    github.commit(C2, {"a.py": A_PY, "b.py": "# moved\n\n" + B_PY, "d.py": "x = 1\njson.loads(data)\n", "e.py": "\n"})

    github.head(C1)
    first = await observe(repository=repository.id)
    assert (first.observed, first.changed) == (5, 0)  # all there: present is what the report said, no feed entry
    assert await _observed_entries(client) == []

    github.head(C2)
    second = await observe(repository=repository.id)
    assert (second.observed, second.changed) == (5, 3)
    now = {name: (await _ledger(o))[0] for name, o in {"a": a, "b": b, "c": c, "d": d, "e": e}.items()}
    assert {k: (v["state"], v["line_start"], v["line_end"], v["reason"]) for k, v in now.items()} == {
        "a": ("present", 3, 3, None),
        "b": ("moved", 4, 5, None),
        "c": ("absent", None, None, "file_missing"),
        "d": ("absent", None, None, "lines_changed"),
        "e": ("present", None, None, None),
    }
    assert [entry["commit"] for entry in await _ledger(b)] == [C2, C1]  # newest first

    # the same head again adds nothing and asks the forge only for the head
    asked = github.asked()
    again = await observe(repository=repository.id)
    assert (again.observed, again.changed, github.asked() - asked) == (0, 0, 1)

    entries = await _observed_entries(client)
    assert sorted((x["state"], x.get("reason"), x["commit"]) for x in entries) == [
        ("absent", "file_missing", C2),
        ("absent", "lines_changed", C2),
        ("moved", None, C2),
    ]
    # evidence, not a verdict: the reviewers' status stays
    assert await rows("SELECT DISTINCT status FROM canonical_findings") == [{"status": "open"}]

    day = f"{datetime.fromisoformat(now['d']['at']).day} {datetime.fromisoformat(now['d']['at']):%b}"
    page = await client.get(f"/findings/{d.public_id}")
    assert f"not in the code at {C2[:7]} on main, {day}: the lines changed" in page.text
    page = await client.get(f"/findings/{b.public_id}")
    assert f"moved to lines 4–5 at {C2[:7]} on main, {day}" in page.text
    twin = (await client.get(f"/findings/{c.public_id}.json")).json()
    assert [(o["state"], o["reason"], o["commit"]) for o in twin["observations"]] == [
        ("absent", "file_missing", C2),
        ("present", None, C1),
    ]
    record = (await client.get(f"/repos/github.com/{OWNER}/{NAME}.json")).json()
    latest = {f["public_id"]: f["observation"] for r in record["reports"] for f in r["findings"]}
    assert latest[str(a.public_id)]["state"] == "present" and latest[str(b.public_id)]["line_start"] == 4
    written = await exports.write_export(tmp_path)  # the export carries each record's ledger, valid against its schema
    schema = json.loads((ROOT / "docs" / "schemas" / "finding.schema.json").read_text())
    exported = {r["finding"]: r for r in records(tmp_path, "findings.ndjson.gz")}
    assert written.files and len(exported) == 5
    for record in exported.values():
        jsonschema_rs.validator_for(schema, validate_formats=True).validate(record)
    assert [o["state"] for o in exported[str(d.public_id)]["observations"]] == ["absent", "present"]
    await act_as(client, await create_account())  # the maintain page lists each finding's newest look
    maintain = await client.get(f"/repos/github.com/{OWNER}/{NAME}/maintain")
    assert f"(c.py): not in the code at {C2[:7]} on main, {day}: the file is gone" in maintain.text


async def test_the_ledger_keeps_the_last_twenty_and_the_feed_says_each_change_once(
    gated: DemoForge, client: httpx.AsyncClient
) -> None:
    github = GitHub(gated, "trunk")
    repository = await _repository(default_branch=None)  # asked of the forge
    scan = await create_scan(repository, await create_account(), commit_sha=C1)
    finding = await _finding(repository, scan, "a.py", 3)
    await _announce(scan)
    github.commit(C1, {"a.py": A_PY})
    heads = [sha(f"head{n}") for n in range(22)]
    for n, head in enumerate(heads):  # the lines vanish at every third head and come back at the next
        github.commit(head, {"a.py": A_PY if n % 3 != 2 else "import os\n"})
        github.head(head, branch="trunk")
        await observe(repository=repository.id)
    ledger = await _ledger(finding)
    assert len(ledger) == 20
    assert [x["commit"] for x in ledger] == heads[::-1][:20]
    assert {x["branch"] for x in ledger} == {"trunk"}
    states = ["absent" if n % 3 == 2 else "present" for n in range(22)]
    changes_ = sum(1 for n in range(22) if states[n] != (states[n - 1] if n else "present"))
    assert len(await _observed_entries(client)) == changes_ == 14


async def test_daily_once_a_day_repo_always_and_unpublished_findings_unannounced(
    github: GitHub, client: httpx.AsyncClient
) -> None:
    repository = await _repository()
    account = await create_account()
    scan = await create_scan(repository, account, commit_sha=C1)
    announced = await _finding(repository, scan, "c.py", 1)
    await _announce(scan)
    quiet = await _finding(repository, await create_scan(repository, account, commit_sha=C1), "c.py", 2)  # no feed
    held = await _finding(repository, await create_scan(repository, account, commit_sha=C1), "d.py", 1)
    # a pending report's finding: not publishable, never observed
    await execute("UPDATE scan_findings SET published_at = NULL WHERE id = :id", id=held.id)
    github.commit(C1, {"c.py": "a = 1\nb = 2\n", "d.py": "x\n"})
    today = datetime.now(UTC)
    github.forge.fail("github.com", 503)
    down = await observe(now=today)  # the forge failing: nothing written, the repository left for the next run
    assert (down.repositories, len(down.skipped), await _ledger(announced)) == (0, 1, [])
    github.forge.fail("github.com", 0)
    github.head(C1)
    assert (await observe(now=today)).repositories == 1
    github.head(C2)  # the code changed, but the daily run already came today
    github.commit(C2, {})
    assert (await observe(now=today + timedelta(seconds=1))).repositories == 0

    result = await tarakan("evidence", "observe", "--repo", f"github.com/{OWNER}/{NAME}")
    assert result.code == 0, result.err
    assert "observed: 2 finding(s) in 1 repository(ies), 1 change(s) announced" in result.out
    assert [x["state"] for x in await _ledger(announced)] == ["absent", "present"]
    assert [x["state"] for x in await _ledger(quiet)] == ["absent", "present"]
    assert await _ledger(held) == []
    entries = await _observed_entries(client)  # the finding the feed never announced has no entry
    assert [x["canonical"] for x in entries] == [await _canonical_public_id(announced)]

    # the next day's job (once fleet-wide per slot, recorded in job_runs) visits it again
    await execute("UPDATE repositories SET observed_at = observed_at - interval '1 day'")
    ctx, slot = {"worker_id": "test-worker", "job_id": "j1"}, datetime(2026, 12, 2, 5, 45, tzinfo=UTC).isoformat()
    assert await observe_job(ctx, slot=slot) and not await observe_job(ctx, slot=slot)
    detail = json.loads(await scalar("SELECT detail FROM job_runs WHERE name = 'observe'"))
    assert (detail["state"], detail["result"]["repositories"]) == ("done", 1)
