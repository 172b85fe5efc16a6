"""an index for the atlas feed's newest infestations (issue 39)

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04 20:00:00

`list_newest_infestations` (the "new" half of /infestations.atom) ordered every pattern of two or more repositories
by first sighting at each render: at Tier B (80,000 patterns) a parallel sort that spilled to disk, 39 ms of
Postgres for 25 rows. This partial index is walked in that order under the LIMIT instead (0.16 ms).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

NAME = "infestation_patterns_first_seen_idx"


def upgrade() -> None:
    # built CONCURRENTLY on a live table, a failed build's INVALID leftover dropped first (as 0002 does)
    with op.get_context().autocommit_block():
        op.execute(
            f"DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            f"WHERE c.relname = '{NAME}' AND NOT i.indisvalid) THEN DROP INDEX {NAME}; END IF; END $$"
        )
        op.create_index(
            NAME,
            "infestation_patterns",
            [sa.text("first_seen_at DESC"), "pattern_key"],
            postgresql_where=sa.text("repo_count >= 2 AND first_seen_at IS NOT NULL"),
            postgresql_concurrently=True,
            if_not_exists=True,
        )


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.drop_index(NAME, table_name="infestation_patterns", postgresql_concurrently=True, if_exists=True)
