"""Webhook deliveries in seq order: only the head of a webhook's queue is due; the fan-out's cursor

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 09:00:00

Two changes to migration 0008's webhook tables (docs/domain.md "Maintainers", "Webhooks"), made before any
release wrote to them:

- `webhook_deliveries.next_attempt_at` becomes nullable with no default: a webhook's entries go out one after the
  other in seq order, so only its oldest undelivered entry has a time to be tried; the rest wait with NULL and the
  delivery of the one before sets the next one's time. The due index then holds exactly what may be sent (a
  receiver failing for a day does not leave its queue in the index the workers scan), and its predicate says so.
- `webhook_fanout`: one row, the change-feed seq up to which entries were turned into deliveries. Without it the
  fan-out would have to move every webhook's `enqueued_seq` past every entry of every repository (a write per
  webhook per change); with it one cursor moves, and `enqueued_seq` only says where a webhook's entries start.
  Seeded at the feed's head (nothing was registered before this revision).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.alter_column(
        "webhook_deliveries",
        "next_attempt_at",
        existing_type=sa.DateTime(timezone=True),
        nullable=True,
        server_default=None,
    )
    op.drop_index("webhook_deliveries_due_idx", table_name="webhook_deliveries")
    op.create_index(
        "webhook_deliveries_due_idx",
        "webhook_deliveries",
        ["next_attempt_at"],
        unique=False,
        postgresql_where=sa.text("delivered_at IS NULL AND next_attempt_at IS NOT NULL"),
    )
    op.create_table(
        "webhook_fanout",
        sa.Column("id", sa.SmallInteger(), autoincrement=False, nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_webhook_fanout_one_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_fanout")),
    )
    op.execute("INSERT INTO webhook_fanout (id, seq) SELECT 1, coalesce(max(seq), 0) FROM changes")


def downgrade() -> None:
    op.drop_table("webhook_fanout")
    op.drop_index("webhook_deliveries_due_idx", table_name="webhook_deliveries")
    op.create_index(
        "webhook_deliveries_due_idx",
        "webhook_deliveries",
        ["next_attempt_at"],
        unique=False,
        postgresql_where=sa.text("delivered_at IS NULL"),
    )
    op.execute("UPDATE webhook_deliveries SET next_attempt_at = now() WHERE next_attempt_at IS NULL")
    op.alter_column(
        "webhook_deliveries",
        "next_attempt_at",
        existing_type=sa.DateTime(timezone=True),
        nullable=False,
        server_default=sa.text("now()"),
    )
