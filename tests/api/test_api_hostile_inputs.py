"""Inputs that answered 500 or were accepted wrongly (issue 11): each is now a 4xx naming the field, and
nothing is stored."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from testkit.servers import fresh_database


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


def _post_raw(client, path: str, raw: bytes):
    return client.post(path, content=raw, headers={"Content-Type": "application/json"})


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        (
            b'{"kind": "bound", "counts": {"tp": 9, "fn": 1, "fp": 1, "tn": 9}, "epsilon": Infinity}',
            "$.epsilon",
        ),
        (b'{"kind": "bound", "scores_in": [0.9, NaN, 0.8], "scores_out": [0.1, 0.2]}', "$.scores_in[1]"),
        (b'{"kind": "bound", "scores_in": [0.9, 0.7], "scores_out": [0.1, -Infinity]}', "$.scores_out[1]"),
        (b'{"kind": "bound", "counts": {"tp": 9, "fn": 1, "fp": 1, "tn": 9}, "epsilon": 1e309}', "$.epsilon"),
        (b'{"kind": "bound", "counts": {"tp": 9, "fn": 1, "fp": 1, "tn": 9}, "epsilon": 1e308}', "$.epsilon"),
        (b'{"kind": "bound", "counts": {"tp": 9, "fn": 1, "fp": 1, "tn": 9}, "delta": 5e-324}', "$.delta"),
        (b"[" * 10_000 + b"]" * 10_000, "$"),
    ],
    ids=[
        "epsilon-Infinity",
        "NaN-score",
        "minus-Infinity-score",
        "epsilon-1e309",
        "epsilon-1e308",
        "delta-5e-324",
        "10000-deep",
    ],
)
def test_non_finite_and_out_of_range_numbers_are_422(client, raw: bytes, path: str) -> None:
    response = _post_raw(client, "/v1/audits", raw)
    assert response.status_code == 422, response.text
    assert path in [d["path"] for d in response.json()["error"]["details"]]
    assert client.get("/v1/audits").json()["audits"] == []


def test_infeasible_synthetic_generation_target_is_422_at_submit(client) -> None:
    from app.audit.kinds.registry import kind_module

    body = {**kind_module("synthetic_generation").EXAMPLE, "target_epsilon": 1e-6}
    response = client.post("/v1/audits", json=body)
    assert response.status_code == 422, response.text
    detail = response.json()["error"]["details"][0]
    assert detail["path"] == "$.target_epsilon" and "not reachable" in detail["message"]
    assert client.get("/v1/audits").json()["audits"] == []


ROWS = b'{"text": "a", "label": "x"}\n{"text": "b", "label": "y"}\n'


@pytest.mark.parametrize(
    ("files", "data", "path"),
    [
        ({"file": ("d.jsonl", ROWS)}, {"name": "n" * 10_000}, "name"),
        ({"file": ("d.json", b"[" * 10_000 + b"]" * 10_000)}, {}, "file"),
        ({"file": ("d.jsonl", ROWS + b'{"text": ' + b"[" * 10_000 + b"]" * 10_000 + b"}\n")}, {}, "file:3"),
    ],
    ids=["name-10000-chars", "json-10000-deep", "jsonl-line-10000-deep"],
)
def test_bad_uploads_are_422_and_store_nothing(client, files: dict, data: dict, path: str) -> None:
    before = client.get("/v1/datasets").json()["datasets"]
    response = client.post("/v1/datasets", files=files, data=data)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["details"][0]["path"] == path
    assert client.get("/v1/datasets").json()["datasets"] == before
