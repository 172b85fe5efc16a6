"""earned trust: what became of each reporter's findings, and the signal it gives (issue 38)

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02 07:10:00

`finding_outcomes` holds only decisions, one per canonical finding (its first published report's), refused
occurrence or refused submission, written once and never changed: an outcome latches (docs/domain.md "Earned
trust"). `account_signals` is the stored signal the report path reads (the gate is stored state, not computed at
read time); `canonical_findings_updated_idx` lets the worker find what moved since its last run.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "finding_outcomes",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("canonical_finding_id", sa.BigInteger(), nullable=True),
        sa.Column("scan_finding_id", sa.BigInteger(), nullable=True),
        sa.Column("refusal_id", sa.BigInteger(), nullable=True),
        sa.Column("account_id", sa.BigInteger(), nullable=False),
        sa.Column("provenance", sa.Text(), nullable=True),
        sa.Column("model", sa.Text(), nullable=True),
        sa.Column("prompt_version", sa.Text(), nullable=True),
        sa.Column("tool", sa.Text(), nullable=True),
        sa.Column("rule_id", sa.Text(), nullable=True),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("decided_at", TZ, nullable=False),
        sa.Column("inserted_at", TZ, server_default=sa.func.now(), nullable=False),
        sa.CheckConstraint(
            "outcome IN ('verified', 'disputed', 'withdrawn', 'refused')", name=op.f("ck_finding_outcomes_outcome")
        ),
        sa.CheckConstraint(
            "num_nonnulls(canonical_finding_id, scan_finding_id, refusal_id) = 1",
            name=op.f("ck_finding_outcomes_one_subject"),
        ),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_finding_outcomes_account_id_accounts"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["canonical_finding_id"],
            ["canonical_findings.id"],
            name=op.f("fk_finding_outcomes_canonical_finding_id_canonical_findings"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["scan_finding_id"],
            ["scan_findings.id"],
            name=op.f("fk_finding_outcomes_scan_finding_id_scan_findings"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["refusal_id"],
            ["report_refusals.id"],
            name=op.f("fk_finding_outcomes_refusal_id_report_refusals"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_finding_outcomes")),
    )
    for column in ("canonical_finding_id", "scan_finding_id", "refusal_id"):
        op.create_index(
            f"finding_outcomes_{column}_idx",
            "finding_outcomes",
            [column],
            unique=True,
            postgresql_where=sa.text(f"{column} IS NOT NULL"),
        )
    op.create_index("finding_outcomes_account_decided_idx", "finding_outcomes", ["account_id", "decided_at"])
    op.create_index("finding_outcomes_decided_idx", "finding_outcomes", ["decided_at"])
    op.create_table(
        "account_signals",
        sa.Column("account_id", sa.BigInteger(), nullable=False),
        sa.Column("decided", sa.Integer(), server_default="0", nullable=False),
        sa.Column("verified", sa.Integer(), server_default="0", nullable=False),
        sa.Column("precision", sa.Float(), server_default="0.5", nullable=False),
        sa.Column("gated", sa.Boolean(), server_default="false", nullable=False),
        sa.Column("pin", sa.Text(), nullable=True),
        sa.Column("pin_reason", sa.Text(), nullable=True),
        sa.Column("updated_at", TZ, server_default=sa.func.now(), nullable=False),
        sa.CheckConstraint("pin IN ('gated', 'open')", name=op.f("ck_account_signals_pin")),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_account_signals_account_id_accounts"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("account_id", name=op.f("pk_account_signals")),
    )
    op.create_index("report_refusals_inserted_idx", "report_refusals", ["inserted_at"])
    op.create_index("canonical_findings_updated_idx", "canonical_findings", ["updated_at"])
    op.create_index(
        "scan_findings_refused_idx",
        "scan_findings",
        ["id"],
        postgresql_where=sa.text("evidence_state IN ('refused', 'expired')"),
    )


def downgrade() -> None:
    op.drop_index("scan_findings_refused_idx", table_name="scan_findings")
    op.drop_index("canonical_findings_updated_idx", table_name="canonical_findings")
    op.drop_index("report_refusals_inserted_idx", table_name="report_refusals")
    op.drop_table("account_signals")
    op.drop_table("finding_outcomes")
