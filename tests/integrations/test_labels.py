"""Free-form labels on audits: bounded, stored, filterable with GET /v1/audits?label=key=value."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from testkit.client import bound_request

# the logic of this test does not depend on the database; PostgreSQL runs the concurrency-bearing ones
SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def test_audits_are_filtered_by_their_labels(client: TestClient, make_key) -> None:
    a = client.post("/v1/audits", json=bound_request(labels={"model": "v7", "sha": "abc"})).json()
    b = client.post("/v1/audits", json=bound_request(labels={"model": "v7", "sha": "def"})).json()
    client.post("/v1/audits", json=bound_request(labels={"model": "v8"}))
    client.post("/v1/audits", json=bound_request())
    assert a["request"]["labels"] == {"model": "v7", "sha": "abc"}

    def ids(*labels: str, view: str = "summary") -> set[str]:
        answer = client.get("/v1/audits", params={"label": list(labels), "view": view})
        assert answer.status_code == 200, answer.text
        return {x["id"] for x in answer.json()["audits"]}

    for view in ("summary", "full"):
        assert ids("model=v7", view=view) == {a["id"], b["id"]}
        assert ids("model=v7", "sha=def", view=view) == {b["id"]}
        assert ids("model=v9", view=view) == set()
    assert len(ids()) == 4
    bob = {"Authorization": f"Bearer {make_key('bob')}"}
    assert client.get("/v1/audits", params={"label": "model=v7"}, headers=bob).json()["audits"] == []

    bad = client.get("/v1/audits", params={"label": "no-equals-sign"})
    assert bad.status_code == 422 and bad.json()["error"]["details"][0]["path"] == "query.label[0]"


@SQLITE_ONLY
def test_labels_are_bounded(client: TestClient) -> None:
    too_many = bound_request(labels={f"k{i}": "v" for i in range(33)})
    assert client.post("/v1/audits", json=too_many).status_code == 422
    long_value = client.post("/v1/audits", json=bound_request(labels={"k": "v" * 256}))
    assert long_value.status_code == 422 and long_value.json()["error"]["details"][0]["path"].startswith(
        "$.labels"
    )
    bad_key = client.post("/v1/audits", json=bound_request(labels={"-bad key": "v"}))
    assert bad_key.status_code == 422
    assert client.get("/v1/audits").json()["audits"] == []
