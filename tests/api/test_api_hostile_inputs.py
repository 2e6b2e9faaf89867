"""Inputs that answered 500 or were accepted wrongly (issue 11): each is now a 4xx naming the field, and
nothing is stored."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from service.servers import fresh_database


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """SQLite only: these are checks at the door, the same on either dialect."""
    return fresh_database("sqlite", tmp_path)


NAIVE_TOKEN = "WyIyMDIwLTAxLTAxVDAwOjAwOjAwIiwgIngiXQ"  # ["2020-01-01T00:00:00", "x"]: no time zone
DEEP_TOKEN = base64.urlsafe_b64encode(b"[" * 1500).decode().rstrip("=")


@pytest.mark.parametrize("path", ["/v1/audits", "/v1/datasets"])
@pytest.mark.parametrize("token", [NAIVE_TOKEN, DEEP_TOKEN], ids=["naive-timestamp", "1500-nested"])
def test_forged_page_token_is_422(client, path: str, token: str) -> None:
    response = client.get(path, params={"page_token": token})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["details"][0]["path"] == "query.page_token"
