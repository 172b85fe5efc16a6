"""per-status windowed rollup counts of the infestation atlas

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30 06:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# The table is filled here, set-based from the instance rows (one statement; the projection's own statement, frozen
# as of this revision), so status-filtered lists are right at once after the upgrade. `tarakan infestations
# backfill` or `recompute-windows` rebuild it the same way at any time.
_FILL = """
INSERT INTO infestation_pattern_status_windows
  (pattern_key, status, window_days, repo_count, instance_count, last_seen_at)
SELECT pr.pattern_key, pr.status, w.window_days, count(*) FILTER (WHERE w.n > 0), sum(w.n), max(w.last_seen_at)
FROM (
  SELECT pattern_key, status, repository_id, count(*) AS n_0, max(updated_at) AS last_0,
    {per_window}
  FROM infestation_pattern_instances GROUP BY pattern_key, status, repository_id
) pr
CROSS JOIN LATERAL (VALUES (0, pr.n_0, pr.last_0), {values}) AS w (window_days, n, last_seen_at)
GROUP BY pr.pattern_key, pr.status, w.window_days
HAVING sum(w.n) > 0
""".format(
    per_window=", ".join(
        f"count(*) FILTER (WHERE updated_at >= now() - interval '{w * 24} hours') AS n_{w}, "
        f"max(updated_at) FILTER (WHERE updated_at >= now() - interval '{w * 24} hours') AS last_{w}"
        for w in (7, 30, 90, 365)
    ),
    values=", ".join(f"({w}, pr.n_{w}, pr.last_{w})" for w in (7, 30, 90, 365)),
)


def upgrade() -> None:
    op.create_table(
        "infestation_pattern_status_windows",
        sa.Column("pattern_key", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("window_days", sa.Integer(), nullable=False),
        sa.Column("repo_count", sa.Integer(), nullable=False),
        sa.Column("instance_count", sa.Integer(), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(
            "pattern_key", "status", "window_days", name=op.f("pk_infestation_pattern_status_windows")
        ),
    )
    op.execute(_FILL)
    # built after the fill: one sort instead of index maintenance per row (the table is new, nothing reads it yet)
    op.create_index(
        "infestation_pattern_status_windows_rank_idx",
        "infestation_pattern_status_windows",
        [
            "status",
            "window_days",
            sa.literal_column("repo_count DESC"),
            sa.literal_column("last_seen_at DESC"),
            "pattern_key",
        ],
        unique=False,
        postgresql_where=sa.text("repo_count >= 2"),
    )


def downgrade() -> None:
    op.drop_index("infestation_pattern_status_windows_rank_idx", table_name="infestation_pattern_status_windows")
    op.drop_table("infestation_pattern_status_windows")
