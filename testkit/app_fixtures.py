"""Fixtures of the tests that drive the app in process (FastAPI's TestClient, lifespan running): a key
maker, a client factory and a client of tenant `alice`. Each resolves the `settings` fixture of the test
that asks, so a directory's conftest defines `settings` and imports these."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app
from testkit.tenants import key_maker


def app_settings(database_url: str, state_dir: Path, data_dir: Path, **changes: Any) -> Settings:
    """A directory's `settings`: the inline executor, authentication on, fast heartbeats and no model
    preloaded, with `changes` on top."""
    return Settings(
        database_url=database_url,
        state_dir=state_dir,
        data_dir=data_dir,
        executor="inline",
        auth_enabled=True,
        heartbeat_seconds=0.5,
        stale_after_seconds=5,
        sweep_seconds=60,
        preload_models=False,
        **changes,
    )


@pytest.fixture
def make_key(settings: Settings) -> Iterator[Callable[[str], str]]:
    """`make_key(tenant)`: a new API key of `tenant` in the test's database."""
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
