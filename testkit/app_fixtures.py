"""Fixtures of the tests that drive the app in process (FastAPI's TestClient, lifespan running): a key
maker, a client factory and a client of tenant `alice`. Each resolves the `settings` fixture of the test
that asks, so a directory's conftest defines `settings` and imports these."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app
from testkit.tenants import key_maker


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
