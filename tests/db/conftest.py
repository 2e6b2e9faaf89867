from __future__ import annotations

from pathlib import Path

import pytest

from testkit.servers import create_database, database_url, postgres_server  # noqa: F401 - fixtures


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database with no tables yet (for the migrations to build): a SQLite file, then a new database
    on the session's PostgreSQL (`postgres` marker)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'empty.db'}"
    server = request.getfixturevalue("postgres_server")
    return create_database(server.url, f"empty_{tmp_path.name[-20:].replace('-', '_').lower()}")
