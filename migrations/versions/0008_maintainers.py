"""Maintainers' right of reply (issue 24): claims, maintainerships, OpenVEX statements, webhooks and deliveries

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 09:00:00

New tables only (nothing existing is rewritten): `maintainer_claims`, `repository_maintainers`,
`finding_statements`, `webhooks`, `webhook_deliveries` (docs/domain.md "Maintainers"). The change feed gains the
kind `finding.statement` and `changes.statement_id` (nullable, no default: adding it rewrites nothing).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_OLD_KINDS = (
    "kind IN ('finding.published', 'finding.status', 'finding.withdrawn', 'repository.listed', 'repository.withdrawn')"
)
_NEW_KINDS = (
    "kind IN ('finding.published', 'finding.status', 'finding.withdrawn', 'repository.listed', "
    "'repository.withdrawn', 'finding.statement')"
)


def upgrade() -> None:
    op.create_table(
        "maintainer_claims",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("repository_id", sa.BigInteger(), nullable=False),
        sa.Column("account_id", sa.BigInteger(), nullable=False),
        sa.Column("token", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), server_default="pending", nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("verified_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("inserted_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "(state = 'verified') = (verified_at IS NOT NULL)", name=op.f("ck_maintainer_claims_verified_at")
        ),
        sa.CheckConstraint("state IN ('pending', 'verified')", name=op.f("ck_maintainer_claims_state")),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_maintainer_claims_account_id_accounts"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["repository_id"],
            ["repositories.id"],
            name=op.f("fk_maintainer_claims_repository_id_repositories"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_maintainer_claims")),
    )
    op.create_index("maintainer_claims_account_idx", "maintainer_claims", ["account_id", "repository_id"], unique=False)
    op.create_index(
        "maintainer_claims_expires_idx",
        "maintainer_claims",
        ["expires_at"],
        unique=False,
        postgresql_where=sa.text("state = 'pending'"),
    )
    op.create_index(
        "maintainer_claims_pending_idx",
        "maintainer_claims",
        ["repository_id", "account_id"],
        unique=True,
        postgresql_where=sa.text("state = 'pending'"),
    )
    op.create_index("maintainer_claims_repository_idx", "maintainer_claims", ["repository_id"], unique=False)
    op.create_table(
        "webhooks",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("repository_id", sa.BigInteger(), nullable=False),
        sa.Column("owner_id", sa.BigInteger(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("failing_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("consecutive_failures", sa.Integer(), server_default="0", nullable=False),
        sa.Column("enqueued_seq", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("last_delivered_seq", sa.BigInteger(), nullable=True),
        sa.Column("inserted_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("consecutive_failures >= 0", name=op.f("ck_webhooks_consecutive_failures")),
        sa.ForeignKeyConstraint(
            ["owner_id"], ["accounts.id"], name=op.f("fk_webhooks_owner_id_accounts"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["repository_id"],
            ["repositories.id"],
            name=op.f("fk_webhooks_repository_id_repositories"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhooks")),
    )
    op.create_index(
        "webhooks_enabled_idx",
        "webhooks",
        ["repository_id", "id"],
        unique=False,
        postgresql_where=sa.text("disabled_at IS NULL"),
    )
    op.create_index("webhooks_owner_idx", "webhooks", ["owner_id"], unique=False)
    op.create_index("webhooks_repository_idx", "webhooks", ["repository_id"], unique=False)
    op.create_table(
        "finding_statements",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("canonical_finding_id", sa.BigInteger(), nullable=False),
        sa.Column("author_id", sa.BigInteger(), nullable=True),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("justification", sa.Text(), nullable=True),
        sa.Column("impact_statement", sa.Text(), nullable=True),
        sa.Column("action_statement", sa.Text(), nullable=True),
        sa.Column("fixed_in", sa.Text(), nullable=True),
        sa.Column("visibility", sa.Text(), server_default="shown", nullable=False),
        sa.Column("inserted_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "fixed_in IS NULL OR (status = 'fixed' AND fixed_in ~ '^[0-9a-f]{40}$')",
            name=op.f("ck_finding_statements_fixed_in"),
        ),
        sa.CheckConstraint(
            "justification IN ('component_not_present', 'vulnerable_code_not_present', 'vulnerable_code_not_in_execute_path', 'vulnerable_code_cannot_be_controlled_by_adversary', 'inline_mitigations_already_exist')",
            name=op.f("ck_finding_statements_justification"),
        ),
        sa.CheckConstraint(
            "status <> 'affected' OR action_statement IS NOT NULL", name=op.f("ck_finding_statements_affected_action")
        ),
        sa.CheckConstraint(
            "status <> 'not_affected' OR justification IS NOT NULL OR impact_statement IS NOT NULL",
            name=op.f("ck_finding_statements_not_affected_reason"),
        ),
        sa.CheckConstraint(
            "status IN ('not_affected', 'affected', 'fixed', 'under_investigation')",
            name=op.f("ck_finding_statements_status"),
        ),
        sa.CheckConstraint("visibility IN ('shown', 'hidden')", name=op.f("ck_finding_statements_visibility")),
        sa.ForeignKeyConstraint(
            ["author_id"], ["accounts.id"], name=op.f("fk_finding_statements_author_id_accounts"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["canonical_finding_id"],
            ["canonical_findings.id"],
            name=op.f("fk_finding_statements_canonical_finding_id_canonical_findings"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_finding_statements")),
    )
    op.create_index("finding_statements_author_idx", "finding_statements", ["author_id"], unique=False)
    op.create_index(
        "finding_statements_canonical_idx", "finding_statements", ["canonical_finding_id", "id"], unique=False
    )
    op.create_index(
        "finding_statements_current_idx",
        "finding_statements",
        ["canonical_finding_id", sa.literal_column("inserted_at DESC"), sa.literal_column("id DESC")],
        unique=False,
        postgresql_where=sa.text("visibility = 'shown'"),
    )
    op.create_table(
        "repository_maintainers",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("repository_id", sa.BigInteger(), nullable=False),
        sa.Column("account_id", sa.BigInteger(), nullable=False),
        sa.Column("claim_id", sa.BigInteger(), nullable=True),
        sa.Column("since", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("replaced_mode", sa.Text(), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_reason", sa.Text(), nullable=True),
        sa.Column("ended_by_id", sa.BigInteger(), nullable=True),
        sa.Column("last_checked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("first_missing_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "ended_reason IN ('file_missing', 'moderation')", name=op.f("ck_repository_maintainers_ended_reason")
        ),
        sa.CheckConstraint(
            "replaced_mode IN ('unclaimed', 'community')", name=op.f("ck_repository_maintainers_replaced_mode")
        ),
        sa.CheckConstraint("(ended_at IS NULL) = (ended_reason IS NULL)", name=op.f("ck_repository_maintainers_ended")),
        sa.ForeignKeyConstraint(
            ["account_id"],
            ["accounts.id"],
            name=op.f("fk_repository_maintainers_account_id_accounts"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["claim_id"],
            ["maintainer_claims.id"],
            name=op.f("fk_repository_maintainers_claim_id_maintainer_claims"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["ended_by_id"],
            ["accounts.id"],
            name=op.f("fk_repository_maintainers_ended_by_id_accounts"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["repository_id"],
            ["repositories.id"],
            name=op.f("fk_repository_maintainers_repository_id_repositories"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_repository_maintainers")),
    )
    op.create_index(
        "repository_maintainers_account_idx", "repository_maintainers", ["account_id", "repository_id"], unique=False
    )
    op.create_index("repository_maintainers_claim_idx", "repository_maintainers", ["claim_id"], unique=False)
    op.create_index(
        "repository_maintainers_current_idx",
        "repository_maintainers",
        ["repository_id", "account_id"],
        unique=True,
        postgresql_where=sa.text("ended_at IS NULL"),
    )
    op.create_index("repository_maintainers_ended_by_idx", "repository_maintainers", ["ended_by_id"], unique=False)
    op.create_index(
        "repository_maintainers_recheck_idx",
        "repository_maintainers",
        [sa.literal_column("last_checked_at NULLS FIRST"), "id"],
        unique=False,
        postgresql_where=sa.text("ended_at IS NULL"),
    )
    op.create_index("repository_maintainers_repository_idx", "repository_maintainers", ["repository_id"], unique=False)
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("webhook_id", sa.BigInteger(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("delivery", sa.Uuid(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("inserted_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("attempts >= 0", name=op.f("ck_webhook_deliveries_attempts")),
        sa.ForeignKeyConstraint(
            ["webhook_id"], ["webhooks.id"], name=op.f("fk_webhook_deliveries_webhook_id_webhooks"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_deliveries")),
    )
    op.create_index("webhook_deliveries_delivery_idx", "webhook_deliveries", ["delivery"], unique=True)
    op.create_index(
        "webhook_deliveries_due_idx",
        "webhook_deliveries",
        ["next_attempt_at"],
        unique=False,
        postgresql_where=sa.text("delivered_at IS NULL"),
    )
    op.create_index(
        "webhook_deliveries_pending_idx",
        "webhook_deliveries",
        ["webhook_id", "seq"],
        unique=False,
        postgresql_where=sa.text("delivered_at IS NULL"),
    )
    op.create_index("webhook_deliveries_webhook_seq_idx", "webhook_deliveries", ["webhook_id", "seq"], unique=True)
    op.add_column("changes", sa.Column("statement_id", sa.BigInteger(), nullable=True))

    op.drop_constraint(op.f("ck_changes_kind"), "changes", type_="check")
    op.create_check_constraint(op.f("ck_changes_kind"), "changes", sa.text(_NEW_KINDS))


def downgrade() -> None:
    op.execute("DELETE FROM changes WHERE kind = 'finding.statement'")
    op.drop_constraint(op.f("ck_changes_kind"), "changes", type_="check")
    op.create_check_constraint(op.f("ck_changes_kind"), "changes", sa.text(_OLD_KINDS))
    op.drop_column("changes", "statement_id")
    op.drop_table("webhook_deliveries")
    op.drop_table("repository_maintainers")
    op.drop_table("finding_statements")
    op.drop_table("webhooks")
    op.drop_table("maintainer_claims")
