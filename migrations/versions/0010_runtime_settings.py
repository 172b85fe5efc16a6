"""Runtime flags in the database: `runtime_settings` (docs/domain.md §13 "Feature flag and Cutover gates")

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-09 09:00:00

One row per flag an operator set with `tarakan flags set` (audited); every web process polls the table, so a change
needs no restart. The migration writes no row: a database where the flag was never set keeps the environment's
default (`INFESTATIONS_READ_FROM_ROLLUP`).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runtime_settings",
        sa.Column("name", sa.Text(), primary_key=True),
        sa.Column("value", postgresql.JSONB(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("runtime_settings")
