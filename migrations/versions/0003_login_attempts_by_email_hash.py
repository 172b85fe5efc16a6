"""login attempts keyed by a hash of the email (fixed-size index rows; no email in clear)

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 10:00:00

`login_attempts` holds only the last day of failed logins, and only its last 15 minutes matter (the login rate
limits, app/accounts/sessions.py). The stored emails cannot be turned into the new keyed hashes in SQL (the key
is the app secret), so the upgrade empties the table: the limits start afresh at the deploy.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("DELETE FROM login_attempts")
    op.drop_index("login_attempts_email_idx", table_name="login_attempts")
    op.drop_column("login_attempts", "email")
    op.add_column("login_attempts", sa.Column("email_hash", sa.LargeBinary(), nullable=False))
    op.create_index(
        "login_attempts_email_ip_idx", "login_attempts", ["email_hash", "ip_hash", "attempted_at"], unique=False
    )


def downgrade() -> None:
    op.execute("DELETE FROM login_attempts")
    op.drop_index("login_attempts_email_ip_idx", table_name="login_attempts")
    op.drop_column("login_attempts", "email_hash")
    op.add_column("login_attempts", sa.Column("email", sa.Text(), nullable=False))
    op.create_index("login_attempts_email_idx", "login_attempts", ["email", "attempted_at"], unique=False)
