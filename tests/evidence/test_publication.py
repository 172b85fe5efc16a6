"""`publishable` on the read side: a report whose evidence is pending is on no public surface, and its publication
(app/evidence/publish.py) puts its confirmed findings on every one, with one `finding.published` each, while a
refused finding of the same report stays off all of them (docs/domain.md "Evidence at the commit")."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from app.evidence.publish import Decision, publish_decided
from app.infestations.dirty_queue import drain_all
from app.kernel import db
from app.registry.stats import invalidate_registry_stats, registry_stats
from app.reports.finding_memory import pattern_key
from app.reports.service import submit_report
from tests import factories
from tests.evidence.support import pending_report
from tests.reports.support import finding, report_body
from tests.surfaces import every_public_body, export_into, public_surfaces

TITLE = "Open redirect after login"
KEY = pattern_key(TITLE)
REFUSED_TITLE = "Hallucinated buffer overflow"
CONFIRMED_PATH, REFUSED_PATH = "src/pending_confirmed.py", "src/pending_refused.py"
SLUG = "github.com/pendco/pendrepo"


@pytest.fixture
def export_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return export_into(tmp_path, monkeypatch)


SURFACES = public_surfaces(SLUG, KEY, "pendrepo")


async def _everything(client: httpx.AsyncClient) -> str:
    """Every public surface's body (and the sitemap's children, and a fresh export), as one text."""
    return await every_public_body(client, SURFACES)


async def _published_entries(client: httpx.AsyncClient) -> list[str]:
    entries = (await client.get("/api/v1/changes", params={"limit": 1000})).json()["entries"]
    return [str(e["finding"]) for e in entries if e["kind"] == "finding.published"]


async def test_a_pending_report_is_on_no_surface_until_published_and_a_refused_finding_never(
    client: httpx.AsyncClient, export_dir: Path
) -> None:
    author = await factories.create_account(state="active")
    elsewhere = await factories.create_repository("keeper", "kept")
    await submit_report(author, "github.com", "keeper", "kept", report_body([finding(title=TITLE, file="src/k.py")]))
    repo = await factories.create_repository("pendco", "pendrepo", listing_status="pending")
    held = await pending_report(repo, author, [(CONFIRMED_PATH, TITLE), (REFUSED_PATH, REFUSED_TITLE)])
    (confirmed_id, confirmed), (refused_id, refused) = held.findings
    await drain_all()
    invalidate_registry_stats()
    stats = await registry_stats()
    feed_before = await _published_entries(client)

    before = await _everything(client)
    for mark in (CONFIRMED_PATH, REFUSED_PATH, confirmed, refused, held.commit_sha, REFUSED_TITLE):
        assert mark not in before, mark
    for ref in (confirmed, refused):
        assert (await client.get(f"/findings/{ref}")).status_code == 404
        assert (await client.get(f"/findings/{ref}.json")).status_code == 404
    twin = (await client.get(f"/infestations/{KEY}.json")).json()
    assert twin["infestation"]["repo_count"] == 1
    assert (await client.get(f"/repos/{SLUG}/badge.svg")).status_code == 404  # not listed: no badge yet
    async with db.read_session(replica=False) as session:
        row = (await session.execute(text("SELECT * FROM repositories WHERE id = :id"), {"id": repo.id})).one()
    assert (row.listing_status, row.scan_count) == ("pending", 0)  # a pending report promotes nothing

    async with db.transaction() as session:
        done = await publish_decided(
            session,
            held.scan_id,
            [
                Decision(confirmed_id, "confirmed", anchor="sha256:" + "a" * 64),
                Decision(refused_id, "refused", reason="not found in github.com/pendco/pendrepo"),
            ],
        )
    assert done is not None and (done.published, done.withheld, done.listing) == (1, 1, "listed")
    await drain_all()
    invalidate_registry_stats()

    after = await _everything(client)
    for mark in (CONFIRMED_PATH, confirmed, held.commit_sha):
        assert mark in after, mark
    for mark in (REFUSED_PATH, refused, REFUSED_TITLE):
        assert mark not in after, mark
    assert (await client.get(f"/findings/{confirmed}.json")).status_code == 200
    assert (await client.get(f"/findings/{refused}")).status_code == 404
    assert (await client.get(f"/findings/{refused}.json")).status_code == 404
    assert (await client.get(f"/infestations/{KEY}.json")).json()["infestation"]["repo_count"] == 2
    assert "1 open" in (await client.get(f"/repos/{SLUG}/badge.svg")).text
    assert (await registry_stats())["repositories"] == stats["repositories"] + 1
    assert await _published_entries(client) == [*feed_before, confirmed]  # one entry, never one for the refused
    async with db.read_session(replica=False) as session:
        counted = await session.execute(
            text("SELECT evidence_state, count(*) FROM scan_findings WHERE scan_id = :id GROUP BY 1"),
            {"id": held.scan_id},
        )
        states = {str(state): int(n) for state, n in counted}
        canonical = (
            await session.execute(
                text("SELECT detections_count FROM canonical_findings WHERE repository_id = :id"), {"id": repo.id}
            )
        ).scalar_one()
    assert states == {"confirmed": 1, "refused": 1} and canonical == 1
    assert elsewhere.id != repo.id

    # published once: a second publication finds nothing pending
    async with db.transaction() as session:
        assert await publish_decided(session, held.scan_id, []) is None
