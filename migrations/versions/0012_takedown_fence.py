"""the takedown fence: audit events numbered at commit, in commit order (issue 34)

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02 04:30:00

`audit_events.fence` is NULL until the event's transaction commits; a deferred constraint trigger numbers it then
from `audit_fence_seq` under the change feed's commit-order lock, so its newest value is the takedown fence the
replica routing, the render cache and the takedown-keyed caches compare (docs/scaling.md "Read replicas"). Events
already stored are committed: they keep their id as their number, and the sequence goes on after the largest.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.kernel import audit

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # ADD COLUMN locks the table until the upgrade commits: an action audited meanwhile inserts its event after that,
    # when the trigger exists, and so none is left unnumbered
    op.add_column("audit_events", sa.Column("fence", sa.BigInteger(), nullable=True))
    op.execute(f"CREATE SEQUENCE {audit.FENCE_SEQUENCE} AS bigint OWNED BY audit_events.fence")
    bind = op.get_bind()
    bind.execute(sa.text("UPDATE audit_events SET fence = id"))
    bind.execute(sa.text(f"SELECT setval('{audit.FENCE_SEQUENCE}', coalesce(max(id), 0) + 1, false) FROM audit_events"))
    op.create_index("audit_events_fence_idx", "audit_events", ["fence"], unique=True)
    op.execute(audit.FENCE_FUNCTION)
    op.execute(audit.FENCE_TRIGGER)


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS audit_events_fence_at_commit ON audit_events")
    op.execute("DROP FUNCTION IF EXISTS audit_events_fence_at_commit()")
    op.drop_index("audit_events_fence_idx", table_name="audit_events")
    op.drop_column("audit_events", "fence")  # drops the sequence it owns
