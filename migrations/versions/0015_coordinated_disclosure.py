"""coordinated disclosure: a clock per canonical finding, the maintainer told first (issue 37)

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02 19:10:00

`disclosures` holds one row per canonical finding ever embargoed (a finding with no row was published at once:
state "immediate"); while its state is `embargoed` the finding's occurrences are stored with
`scan_findings.held_reason = 'embargo'` and `published_at` NULL, so `publishable` keeps them off every public
surface. `repositories.disclosure_days` is a verified maintainer's window (0: none), `scans.disclosure_days` the
reporter's request, kept so the worker that confirms pending evidence applies it (docs/domain.md "Coordinated
disclosure").
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "disclosures",
        sa.Column("canonical_finding_id", sa.BigInteger(), nullable=False),
        sa.Column("repository_id", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.Text(), server_default="embargoed", nullable=False),
        sa.Column("reported_at", TZ, nullable=False),
        sa.Column("deadline", TZ, nullable=False),
        sa.Column("reporter_days", sa.SmallInteger(), nullable=True),
        sa.Column("repository_days", sa.SmallInteger(), server_default="0", nullable=False),
        sa.Column("notified_at", TZ, nullable=True),
        sa.Column("acknowledged_at", TZ, nullable=True),
        sa.Column(
            "extensions", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'[]'::jsonb"), nullable=False
        ),
        sa.Column("published_at", TZ, nullable=True),
        sa.Column("published_because", sa.Text(), nullable=True),
        sa.Column("inserted_at", TZ, server_default=sa.func.now(), nullable=False),
        sa.Column("updated_at", TZ, server_default=sa.func.now(), nullable=False),
        sa.CheckConstraint("state IN ('embargoed', 'published')", name=op.f("ck_disclosures_state")),
        sa.CheckConstraint(
            "published_because IN ('deadline', 'fixed', 'maintainer', 'moderator', 'reporter')",
            name=op.f("ck_disclosures_published_because"),
        ),
        sa.CheckConstraint(
            "(state = 'published') = (published_at IS NOT NULL)", name=op.f("ck_disclosures_published_when")
        ),
        sa.ForeignKeyConstraint(
            ["canonical_finding_id"],
            ["canonical_findings.id"],
            name=op.f("fk_disclosures_canonical_finding_id_canonical_findings"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["repository_id"],
            ["repositories.id"],
            name=op.f("fk_disclosures_repository_id_repositories"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("canonical_finding_id", name=op.f("pk_disclosures")),
    )
    # the clock's due scan and the open ledger (by deadline); a repository's stub; the last 30 days' publications
    op.create_index(
        "disclosures_open_deadline_idx", "disclosures", ["deadline"], postgresql_where=sa.text("state = 'embargoed'")
    )
    op.create_index("disclosures_repository_idx", "disclosures", ["repository_id", "state"])
    op.create_index(
        "disclosures_published_idx", "disclosures", ["published_at"], postgresql_where=sa.text("state = 'published'")
    )
    op.add_column("repositories", sa.Column("disclosure_days", sa.SmallInteger(), server_default="0", nullable=False))
    op.create_check_constraint(
        op.f("ck_repositories_disclosure_days"), "repositories", "disclosure_days BETWEEN 0 AND 90"
    )
    op.add_column("scans", sa.Column("disclosure_days", sa.SmallInteger(), nullable=True))
    op.create_check_constraint(op.f("ck_scans_disclosure_days"), "scans", "disclosure_days BETWEEN 7 AND 90")
    # `finding.embargoed`: a private delivery (no change-feed entry until publication) of one canonical to one
    # webhook of its repository's maintainers: `seq` NULL, the canonical named instead, at most one per webhook
    op.add_column("webhook_deliveries", sa.Column("canonical_finding_id", sa.BigInteger(), nullable=True))
    op.create_foreign_key(
        op.f("fk_webhook_deliveries_canonical_finding_id_canonical_findings"),
        "webhook_deliveries",
        "canonical_findings",
        ["canonical_finding_id"],
        ["id"],
        ondelete="CASCADE",
    )
    op.alter_column("webhook_deliveries", "seq", existing_type=sa.BigInteger(), nullable=True)
    op.create_check_constraint(
        op.f("ck_webhook_deliveries_private_entry"),
        "webhook_deliveries",
        "(seq IS NULL) = (canonical_finding_id IS NOT NULL)",
    )
    op.create_index(
        "webhook_deliveries_embargoed_idx",
        "webhook_deliveries",
        ["webhook_id", "canonical_finding_id"],
        unique=True,
        postgresql_where=sa.text("canonical_finding_id IS NOT NULL"),
    )
    op.create_index(
        "webhook_deliveries_canonical_idx",
        "webhook_deliveries",
        ["canonical_finding_id"],
        postgresql_where=sa.text("canonical_finding_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("webhook_deliveries_canonical_idx", table_name="webhook_deliveries")
    op.drop_index("webhook_deliveries_embargoed_idx", table_name="webhook_deliveries")
    op.execute("DELETE FROM webhook_deliveries WHERE seq IS NULL")
    op.drop_constraint(op.f("ck_webhook_deliveries_private_entry"), "webhook_deliveries", type_="check")
    op.alter_column("webhook_deliveries", "seq", existing_type=sa.BigInteger(), nullable=False)
    op.drop_constraint(
        op.f("fk_webhook_deliveries_canonical_finding_id_canonical_findings"), "webhook_deliveries", type_="foreignkey"
    )
    op.drop_column("webhook_deliveries", "canonical_finding_id")
    op.drop_constraint(op.f("ck_scans_disclosure_days"), "scans", type_="check")
    op.drop_column("scans", "disclosure_days")
    op.drop_constraint(op.f("ck_repositories_disclosure_days"), "repositories", type_="check")
    op.drop_column("repositories", "disclosure_days")
    op.drop_table("disclosures")
