"""indexes for min/max(refreshed_at) and login attempt pruning

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 20:45:00
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


# Indexes on live tables are built CONCURRENTLY (docs/operations.md "Deploy and migrate"): no lock that blocks
# writes while they build. CONCURRENTLY cannot run inside a transaction, hence the autocommit block; a build that
# failed leaves an INVALID index behind, which IF NOT EXISTS would keep, so a rerun drops an invalid one first.
INDEXES = (
    ("infestation_patterns_refreshed_at_idx", "infestation_patterns", "refreshed_at"),
    ("login_attempts_attempted_at_idx", "login_attempts", "attempted_at"),
)


def upgrade() -> None:
    with op.get_context().autocommit_block():
        for name, table, column in INDEXES:
            op.execute(
                f"DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                f"WHERE c.relname = '{name}' AND NOT i.indisvalid) THEN DROP INDEX {name}; END IF; END $$"
            )
            op.create_index(name, table, [column], postgresql_concurrently=True, if_not_exists=True)


def downgrade() -> None:
    with op.get_context().autocommit_block():
        for name, table, _ in reversed(INDEXES):
            op.drop_index(name, table_name=table, postgresql_concurrently=True, if_exists=True)
