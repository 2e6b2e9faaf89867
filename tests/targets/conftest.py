"""Audits of real deployments: the API fixtures (real app, inline executor, migrated SQLite file)."""

from __future__ import annotations

from pathlib import Path

import pytest
from api.conftest import settings  # noqa: F401 - fixture

from testkit.app_fixtures import app_client, make_key  # noqa: F401 - fixtures
from testkit.servers import fresh_database


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """SQLite: a file the secrets test can read byte for byte."""
    return fresh_database("sqlite", tmp_path)
