"""The models and the Alembic history describe the same schema."""

from __future__ import annotations

import os

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine

from app.models import metadata


def test_models_and_migrations_do_not_drift() -> None:
    engine = create_engine(os.environ["DATABASE_URL"])
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_server_default": True})
            diff = compare_metadata(ctx, metadata)
    finally:
        engine.dispose()
    assert diff == [], f"models and migrations differ: {diff}"
