"""Alembic: an empty database of either dialect goes to head and back to base, and head matches the models."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from app.db.engine import make_engine
from app.db.migrate import current_revision, downgrade, head_revision, upgrade
from app.db.models import Base
from testkit.servers import create_database


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'empty.db'}"
    server = request.getfixturevalue("postgres_server")
    return create_database(server.url, f"empty_{tmp_path.name[-20:].replace('-', '_').lower()}")


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
