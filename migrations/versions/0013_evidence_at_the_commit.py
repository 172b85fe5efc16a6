"""evidence at the commit: publication columns, the forge caches, the refusal log, repository metadata (issue 36)

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02 07:00:00

`scans.published_at` and `scan_findings.published_at` are the stored half of `publishable` (docs/domain.md
"Evidence at the commit"): NULL while a gate holds the report or the occurrence back, set by the transaction that
publishes it. Both default to now(): every insert that passes its gates is published as it is written, and the rows
already stored migrate as published (PostgreSQL fills an ADD COLUMN's constant default without a rewrite; now() is
evaluated once, at the upgrade). Rows already stored are `unchecked`. The change feed gains the kind
`finding.observed` (observations: docs/domain.md "Observations"), its reasons and `changes.commit_sha`.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from app.kernel.audit import COMMIT_ORDER_LOCK
from app.record import changes

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

EVIDENCE_STATES = "('confirmed', 'pending', 'refused', 'expired', 'unchecked')"
METADATA_STATES = "('unchecked', 'pending', 'found')"
TZ = sa.DateTime(timezone=True)
_KINDS = (
    "'finding.published', 'finding.status', 'finding.withdrawn', 'repository.listed', 'repository.withdrawn', "
    "'finding.statement'"
)
_REASONS = "'moderation', 'repository', 'deleted'"


def _feed_checks(kinds: str, reasons: str) -> None:
    for name, condition in (("ck_changes_kind", f"kind IN ({kinds})"), ("ck_changes_reason", f"reason IN ({reasons})")):
        op.drop_constraint(op.f(name), "changes", type_="check")
        op.create_check_constraint(op.f(name), "changes", sa.text(condition))


def upgrade() -> None:
    op.add_column("scans", sa.Column("published_at", TZ, server_default=sa.func.now(), nullable=True))
    op.add_column("scans", sa.Column("commit_committed_at", TZ, nullable=True))
    op.add_column("scans", sa.Column("evidence_attempts", sa.Integer(), server_default="0", nullable=False))
    op.add_column("scans", sa.Column("evidence_next_at", TZ, nullable=True))
    op.create_index(
        "scans_evidence_due_idx",
        "scans",
        ["evidence_next_at"],
        postgresql_where=sa.text("evidence_next_at IS NOT NULL"),
    )

    op.add_column("scan_findings", sa.Column("published_at", TZ, server_default=sa.func.now(), nullable=True))
    op.add_column("scan_findings", sa.Column("evidence_state", sa.Text(), server_default="unchecked", nullable=False))
    op.create_check_constraint(
        op.f("ck_scan_findings_evidence_state"), "scan_findings", f"evidence_state IN {EVIDENCE_STATES}"
    )
    op.add_column("scan_findings", sa.Column("evidence_reason", sa.Text(), nullable=True))
    op.add_column("scan_findings", sa.Column("anchor", sa.Text(), nullable=True))
    op.add_column("scan_findings", sa.Column("rule_id", sa.Text(), nullable=True))
    op.add_column("scan_findings", sa.Column("held_reason", sa.Text(), nullable=True))

    op.add_column(
        "canonical_findings",
        sa.Column("observations", postgresql.JSONB(), server_default=sa.text("'[]'::jsonb"), nullable=False),
    )

    op.add_column("repositories", sa.Column("default_branch", sa.Text(), nullable=True))
    op.add_column("repositories", sa.Column("forge_id", sa.Text(), nullable=True))
    op.add_column("repositories", sa.Column("metadata_state", sa.Text(), server_default="unchecked", nullable=False))
    op.create_check_constraint(
        op.f("ck_repositories_metadata_state"), "repositories", f"metadata_state IN {METADATA_STATES}"
    )
    op.add_column("repositories", sa.Column("metadata_etag", sa.Text(), nullable=True))
    op.add_column("repositories", sa.Column("metadata_checked_at", TZ, nullable=True))
    op.add_column("repositories", sa.Column("forge_missing_runs", sa.Integer(), server_default="0", nullable=False))
    op.add_column("repositories", sa.Column("forge_redirect", sa.Text(), nullable=True))
    op.add_column("repositories", sa.Column("observed_at", TZ, nullable=True))

    op.create_table(
        "forge_commits",
        sa.Column("repository_id", sa.BigInteger(), nullable=False),
        sa.Column("commit_sha", sa.Text(), nullable=False),
        sa.Column("present", sa.Boolean(), nullable=False),
        sa.Column("committed_at", TZ, nullable=True),
        sa.Column("checked_at", TZ, server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(
            ["repository_id"],
            ["repositories.id"],
            name="fk_forge_commits_repository_id_repositories",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("repository_id", "commit_sha", name="pk_forge_commits"),
    )
    op.create_table(
        "forge_files",
        sa.Column("repository_id", sa.BigInteger(), nullable=False),
        sa.Column("commit_sha", sa.Text(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("present", sa.Boolean(), nullable=False),
        sa.Column("line_digests", sa.LargeBinary(), nullable=True),
        sa.Column("checked_at", TZ, server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(
            ["repository_id"], ["repositories.id"], name="fk_forge_files_repository_id_repositories", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("repository_id", "commit_sha", "path", name="pk_forge_files"),
    )
    op.create_table(
        "report_refusals",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("account_id", sa.BigInteger(), nullable=False),
        sa.Column("repository_id", sa.BigInteger(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("inserted_at", TZ, server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name="fk_report_refusals_account_id_accounts", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["repository_id"],
            ["repositories.id"],
            name="fk_report_refusals_repository_id_repositories",
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_report_refusals"),
    )
    op.create_index("report_refusals_account_inserted_idx", "report_refusals", ["account_id", "inserted_at"])
    op.add_column("changes", sa.Column("commit_sha", sa.Text(), nullable=True))  # finding.observed: the head read
    _feed_checks(f"{_KINDS}, 'finding.observed'", f"{_REASONS}, 'file_missing', 'lines_changed'")
    # the change feed's seed (moved here from 0005: the join set's statements read the columns above); the whole
    # diff is idempotent, so a feed 0005 seeded already gains nothing
    bind = op.get_bind()
    bind.execute(sa.text(f"SELECT pg_advisory_xact_lock({COMMIT_ORDER_LOCK})"))
    for statement in changes.seed_statements():
        bind.execute(statement)


def downgrade() -> None:
    op.execute("DELETE FROM changes WHERE kind = 'finding.observed'")
    _feed_checks(_KINDS, _REASONS)
    op.drop_column("changes", "commit_sha")
    op.drop_table("report_refusals")
    op.drop_table("forge_files")
    op.drop_table("forge_commits")
    for name in (
        "observed_at", "forge_redirect", "forge_missing_runs", "metadata_checked_at", "metadata_etag",
        "metadata_state", "forge_id", "default_branch",
    ):  # fmt: skip
        op.drop_column("repositories", name)
    op.drop_column("canonical_findings", "observations")
    for name in ("held_reason", "rule_id", "anchor", "evidence_reason", "evidence_state", "published_at"):
        op.drop_column("scan_findings", name)
    op.drop_index("scans_evidence_due_idx", table_name="scans")
    for name in ("evidence_next_at", "evidence_attempts", "commit_committed_at", "published_at"):
        op.drop_column("scans", name)
