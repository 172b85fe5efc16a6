"""Is the database's schema the one this code was written for: `behind` refuses to serve, `ahead` serves with a warning
(docs/operations.md "Deploy and migrate")."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from alembic.script import ScriptDirectory
from sqlalchemy import text

from app.kernel import db

MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"


@functools.cache
def code_head() -> str:
    """The newest migration revision this code ships."""
    head = ScriptDirectory(str(MIGRATIONS)).get_current_head()
    assert head is not None, "no migrations found"
    return head


@functools.cache
def _known_revisions() -> frozenset[str]:
    return frozenset(script.revision for script in ScriptDirectory(str(MIGRATIONS)).walk_revisions())


@dataclass(frozen=True)
class SchemaState:
    state: str  # "current" | "behind" | "ahead"
    database: str | None  # the database's revision, None when it was never migrated
    code: str

    @property
    def ok(self) -> bool:
        return self.state != "behind"

    def describe(self) -> str:
        if self.state == "current":
            return f"schema at {self.code}"
        if self.state == "ahead":
            return f"schema {self.database} is ahead of this code's {self.code} (a rolling upgrade?); serving anyway"
        found = self.database or "no migrations"
        return f"schema is behind: database at {found}, code needs {self.code}; run `tarakan migrate`"


async def schema_state() -> SchemaState:
    """Compare the database's alembic revision with this code's head (on the primary)."""
    async with db.read_session(replica=False) as session:
        exists = (await session.execute(text("SELECT to_regclass('public.alembic_version') IS NOT NULL"))).scalar()
        revisions = (
            list((await session.execute(text("SELECT version_num FROM alembic_version"))).scalars()) if exists else []
        )
    head = code_head()
    if not revisions:
        return SchemaState("behind", None, head)
    revision = str(revisions[0])
    if revision == head:
        return SchemaState("current", revision, head)
    if revision in _known_revisions():
        return SchemaState("behind", revision, head)
    return SchemaState("ahead", revision, head)
