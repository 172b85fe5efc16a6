"""partialFingerprints kept with findings (SARIF 2.1.0 ingestion)

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 06:30:00
"""

from __future__ import annotations

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
