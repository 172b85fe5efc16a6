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


def upgrade() -> None:
    op.create_index("infestation_patterns_refreshed_at_idx", "infestation_patterns", ["refreshed_at"])
    op.create_index("login_attempts_attempted_at_idx", "login_attempts", ["attempted_at"])


def downgrade() -> None:
    op.drop_index("login_attempts_attempted_at_idx", table_name="login_attempts")
    op.drop_index("infestation_patterns_refreshed_at_idx", table_name="infestation_patterns")
