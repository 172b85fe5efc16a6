"""`./run`'s offline first hour: the demo seed puts its repositories and the files its findings cite into the demo
forge's folder, so with the evidence gate on every seeded finding is confirmed at its commit and published."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from app.devforge import DEMO_FORGE_DIR, FolderForge
from app.kernel import db
from app.seed import seed_demo
from app.seed_data import DEMO_ONE_OFFS


@pytest.fixture
def folder_forge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FolderForge]:
    forge = FolderForge(tmp_path / "forge").start()
    for name, value in {"EVIDENCE_CHECK": "gate", DEMO_FORGE_DIR: str(forge.folder), **forge.settings()}.items():
        monkeypatch.setenv(name, value)
    yield forge
    forge.stop()


_STATES = """
SELECT f.evidence_state, f.published_at IS NOT NULL AS published, count(*) AS n,
       count(s.commit_committed_at) AS dated
FROM scan_findings f JOIN scans s ON s.id = f.scan_id GROUP BY 1, 2
"""


async def test_the_seed_writes_what_its_findings_cite_and_the_gate_confirms_them(folder_forge: FolderForge) -> None:
    summary = await seed_demo(if_empty=True)
    assert summary["reports_submitted"] == 95 + len(DEMO_ONE_OFFS)
    async with db.read_session(replica=False) as session:
        rows = [tuple(r) for r in (await session.execute(text(_STATES))).all()]
        found = await session.execute(text("SELECT count(*) FROM repositories WHERE metadata_state = 'found'"))
    assert rows == [("confirmed", True, 100, 100)]
    assert found.scalar_one() == 12  # registration found each demo repository on the forge
    # each repository's commits are its reports', the newest the default branch's head
    assert len(list(folder_forge.folder.glob("github.com/*/*/repository.json"))) == 12
    assert folder_forge.forge.requests("github.com", "/raw/")
