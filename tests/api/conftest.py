"""API tests: the real app (lifespan, inline executor) over a migrated SQLite file or the session's
PostgreSQL, with authentication on and two tenants."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app
from testkit.servers import database_url, postgres_server  # noqa: F401 - fixtures
from testkit.tenants import key_maker


@pytest.fixture
def settings(database_url: str, tmp_path: Path, data_dir: Path) -> Settings:  # noqa: F811
    return Settings(
        database_url=database_url,
        state_dir=tmp_path,
        data_dir=data_dir,
        executor="inline",
        inline_workers=1,
        auth_enabled=True,
        heartbeat_seconds=0.5,
        stale_after_seconds=5,
        sweep_seconds=60,
        preload_models=False,
        max_trials=8_000_000,  # the polling tests hold the single inline worker with a long audit
        metrics_token="test-metrics-token",  # /metrics is closed with auth on and no token (issue 20 L4)
    )


@pytest.fixture
def make_key(settings: Settings) -> Iterator[Callable[[str], str]]:
    with key_maker(settings.sqlalchemy_url) as make:
        yield make


@pytest.fixture
def app_client(settings: Settings) -> Callable[..., Any]:
    """`with app_client(**setting_changes) as client:` a TestClient around a fresh app."""

    @contextmanager
    def open_client(**changes: Any) -> Iterator[TestClient]:
        with TestClient(create_app(settings.model_copy(update=changes))) as client:
            yield client

    return open_client


@pytest.fixture
def client(app_client: Callable[..., Any], make_key: Callable[[str], str]) -> Iterator[TestClient]:
    """Authenticated as tenant `alice`."""
    with app_client() as c:
        c.headers["Authorization"] = f"Bearer {make_key('alice')}"
        yield c
