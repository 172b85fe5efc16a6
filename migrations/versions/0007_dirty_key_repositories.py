"""The dirty-key queue names the repositories that changed under a key (scoped refresh)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30 09:20:00

`infestation_dirty_keys.repository_ids`: the repositories whose rows of the key changed since it was marked, so the
drain re-projects only those from source (docs/domain.md §5.2 "Scoped refresh"); NULL = the whole key. Nullable, no
default: adding it rewrites nothing, and rows queued before it refresh their whole key, as before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "infestation_dirty_keys", sa.Column("repository_ids", postgresql.ARRAY(sa.BigInteger()), nullable=True)
    )


def downgrade() -> None:
    op.drop_column("infestation_dirty_keys", "repository_ids")
