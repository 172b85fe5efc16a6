"""Maintainer repairs (issue 34): two more end reasons and the unreachable-proof counters

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02 04:00:00

`repository_maintainers.ended_reason` gains `account_locked` (the account was banned or suspended) and
`proof_unreachable` (the forge answered a redirect or 401 over three rechecks at least a day apart), and the table
gains `first_unreachable_at` (nullable) and `unreachable_checks` (default 0; a constant default rewrites nothing on
PostgreSQL 11+). docs/domain.md "Maintainers".
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_OLD_REASONS = "ended_reason IN ('file_missing', 'moderation')"
_NEW_REASONS = "ended_reason IN ('file_missing', 'moderation', 'account_locked', 'proof_unreachable')"


def upgrade() -> None:
    op.drop_constraint(op.f("ck_repository_maintainers_ended_reason"), "repository_maintainers", type_="check")
    op.create_check_constraint(
        op.f("ck_repository_maintainers_ended_reason"), "repository_maintainers", sa.text(_NEW_REASONS)
    )
    op.add_column(
        "repository_maintainers", sa.Column("first_unreachable_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column(
        "repository_maintainers",
        sa.Column("unreachable_checks", sa.SmallInteger(), server_default="0", nullable=False),
    )


def downgrade() -> None:
    op.drop_column("repository_maintainers", "unreachable_checks")
    op.drop_column("repository_maintainers", "first_unreachable_at")
    # rows ended for the new reasons keep their history under the nearest old one
    op.execute(
        "UPDATE repository_maintainers SET ended_reason = 'moderation' "
        "WHERE ended_reason IN ('account_locked', 'proof_unreachable')"
    )
    op.drop_constraint(op.f("ck_repository_maintainers_ended_reason"), "repository_maintainers", type_="check")
    op.create_check_constraint(
        op.f("ck_repository_maintainers_ended_reason"), "repository_maintainers", sa.text(_OLD_REASONS)
    )
