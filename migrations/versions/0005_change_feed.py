"""the public change feed (/api/v1/changes) and finding tombstones

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 06:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.record.models import COMMIT_SEQUENCE, NUMBERING_FUNCTION, NUMBERING_TRIGGER

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "changes",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("finding", sa.Uuid(), nullable=True),
        sa.Column("canonical", sa.Uuid(), nullable=True),
        sa.Column("repository_id", sa.BigInteger(), nullable=True),
        sa.Column("repository_key", sa.Uuid(), nullable=True),
        sa.Column("pattern_key", sa.Text(), nullable=True),
        sa.Column("status", sa.Text(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "kind IN ('finding.published', 'finding.status', 'finding.withdrawn', 'repository.listed', "
            "'repository.withdrawn')",
            name=op.f("ck_changes_kind"),
        ),
        sa.CheckConstraint("reason IN ('moderation', 'repository', 'deleted')", name=op.f("ck_changes_reason")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_changes")),
    )
    op.create_index("changes_seq_idx", "changes", ["seq"], unique=True)
    op.create_index("changes_unnumbered_idx", "changes", ["id"], postgresql_where=sa.text("seq IS NULL"))
    op.create_index("changes_finding_idx", "changes", ["finding"], postgresql_where=sa.text("finding IS NOT NULL"))
    op.create_index(
        "changes_withdrawals_idx",
        "changes",
        ["seq"],
        postgresql_where=sa.text("kind IN ('finding.withdrawn', 'repository.withdrawn')"),
    )
    op.create_table(
        "published_repositories",
        sa.Column("repository_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("opaque_id", sa.Uuid(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("listed", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("repository_id", name=op.f("pk_published_repositories")),
    )
    op.create_index("published_repositories_opaque_id_idx", "published_repositories", ["opaque_id"], unique=True)
    op.create_table(
        "published_findings",
        sa.Column("scan_finding_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("public_id", sa.Uuid(), nullable=False),
        sa.Column("scan_id", sa.BigInteger(), nullable=False),
        sa.Column("repository_id", sa.BigInteger(), nullable=False),
        sa.Column("canonical_id", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("scan_finding_id", name=op.f("pk_published_findings")),
    )
    op.create_index("published_findings_scan_idx", "published_findings", ["scan_id"])
    op.create_index("published_findings_repository_idx", "published_findings", ["repository_id"])
    op.create_index("published_findings_canonical_idx", "published_findings", ["canonical_id"])
    op.create_table(
        "published_canonicals",
        sa.Column("canonical_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("public_id", sa.Uuid(), nullable=False),
        sa.Column("repository_id", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("canonical_id", name=op.f("pk_published_canonicals")),
    )
    op.create_index("published_canonicals_repository_idx", "published_canonicals", ["repository_id"])
    op.execute(f"CREATE SEQUENCE {COMMIT_SEQUENCE} AS bigint OWNED BY changes.seq")
    op.execute(NUMBERING_FUNCTION)
    op.execute(NUMBERING_TRIGGER)
    # what is public at upgrade time is announced from seq 1 by 0013's seed: the code's join set reads its columns


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS changes_number_at_commit ON changes")
    op.execute("DROP FUNCTION IF EXISTS changes_number_at_commit()")
    op.drop_table("published_canonicals")
    op.drop_table("published_findings")
    op.drop_table("published_repositories")
    op.drop_table("changes")
    op.execute(f"DROP SEQUENCE IF EXISTS {COMMIT_SEQUENCE}")
