"""partialFingerprints kept with findings (SARIF 2.1.0 ingestion)

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 06:30:00

A SARIF result's `partialFingerprints` (docs/sarif.md) belong to the occurrence it became (`scan_findings`): each
report is one scanner's run, and the canonical finding keeps the registry's own fingerprint. Nullable, no default:
adding it rewrites nothing.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "scan_findings",
        sa.Column("partial_fingerprints", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    )


def downgrade() -> None:
    op.drop_column("scan_findings", "partial_fingerprints")
