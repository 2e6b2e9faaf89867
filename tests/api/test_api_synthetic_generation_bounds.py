"""synthetic_generation with clip 1e200, temperature 1, batch_size 2 overflowed the theory at submit (an
OverflowError, a 500; issue 18 §4): now a 422 naming the field, and nothing is stored."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.servers import fresh_database


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    return fresh_database("sqlite", tmp_path)


@pytest.mark.parametrize(("field", "value"), [("clip", 1e200), ("temperature", 1e-300)])
def test_overflowing_synthetic_generation_parameters_are_422(client, field: str, value: float) -> None:
    body = {
        "kind": "synthetic_generation",
        "dataset": "ag_news",
        "model": "smollm2-135m-instruct",
        "seed": 5070,
        "clip": 1.0,
        "temperature": 1.0,
        "batch_size": 2,
    } | {field: value}
    response = client.post("/v1/audits", json=body)
    assert response.status_code == 422, response.text
    assert [d["path"] for d in response.json()["error"]["details"]] == [f"$.{field}"]
    assert client.get("/v1/audits").json()["audits"] == []
