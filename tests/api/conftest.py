"""API tests: the real app (lifespan, inline executor) over a migrated SQLite file or the session's
PostgreSQL, with authentication on and two tenants."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.config import Settings
from testkit.app_fixtures import app_client, app_settings, client, make_key  # noqa: F401 - fixtures
from testkit.servers import database_url, postgres_server  # noqa: F401 - fixtures


@pytest.fixture
def settings(database_url: str, tmp_path: Path, data_dir: Path) -> Settings:  # noqa: F811
    return app_settings(
        database_url,
        tmp_path,
        data_dir,
        inline_workers=1,
        max_trials=8_000_000,  # the polling tests hold the single inline worker with a long audit
        metrics_token="test-metrics-token",  # /metrics is closed with auth on and no token (issue 20 L4)
    )
