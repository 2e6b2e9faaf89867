"""Alembic: an empty database of either dialect goes to head and back to base, and head matches the models."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from app.db.engine import make_engine
from app.db.migrate import current_revision, downgrade, head_revision, upgrade
from app.db.models import Base


def test_upgrade_to_head_matches_models_then_downgrade_to_base(empty_url: str) -> None:
    upgrade(empty_url)
    engine = make_engine(empty_url)
    try:
        assert current_revision(engine) == head_revision()
        with engine.connect() as connection:
            diff = compare_metadata(
                MigrationContext.configure(connection, opts={"compare_type": True}), Base.metadata
            )
        assert diff == []
        downgrade(empty_url, "base")
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
        assert current_revision(engine) is None
        upgrade(empty_url)  # and up again
        assert current_revision(engine) == head_revision()
    finally:
        engine.dispose()
