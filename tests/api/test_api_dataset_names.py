"""Datasets by name: a name is unique per tenant up to its version, uploading it again makes the next version
(and the answer says which it replaces), and `"dataset": "<name>"` works wherever an id does — resolved at
submit to the newest version's id, which the audit stores."""

from __future__ import annotations

import json

import pytest

from testkit.client import white_box_request


def _jsonl(n: int, word: str) -> bytes:
    return "\n".join(
        json.dumps({"text": f"{word} note {i}, about week {i} of the trial", "label": "a" if i % 2 else "b"})
        for i in range(n)
    ).encode()


def _upload(client, name: str, word: str = "first", n: int = 12) -> dict:
    response = client.post(
        "/v1/datasets", files={"file": ("tickets.jsonl", _jsonl(n, word))}, data={"name": name}
    )
    assert response.status_code == 201, response.text
    return response.json()


def test_a_name_reuploaded_is_a_new_version_and_resolves_to_the_newest(client, make_key) -> None:
    first = _upload(client, "support")
    assert first["version"] == 1 and first["replaces"] is None
    second = _upload(client, "support", word="second", n=14)
    assert second["name"] == "support" and second["version"] == 2 and second["replaces"] == first["id"]
    assert client.get(f"/v1/datasets/{first['id']}").json()["version"] == 1  # the old version stays

    listed = {d["id"]: (d["name"], d["version"]) for d in client.get("/v1/datasets").json()["datasets"]}
    assert listed == {first["id"]: ("support", 1), second["id"]: ("support", 2)}

    by_name = client.post("/v1/audits", json=white_box_request("support", 2, 2, secret="continuation"))
    assert by_name.status_code == 202, by_name.text
    assert by_name.json()["request"]["dataset"] == second["id"]  # stored as the newest version's id
    by_id = client.post("/v1/audits", json=white_box_request(first["id"], 2, 2, secret="continuation"))
    assert by_id.status_code == 202 and by_id.json()["request"]["dataset"] == first["id"]

    # a sweep's children resolve the name too; its base keeps what was given
    sweep = client.post(
        "/v1/sweeps",
        json={
            "base": white_box_request("support", 2, 2, secret="continuation"),
            "grid": {"seed": [0, 1]},
            "seeds": 1,
        },
    )
    assert sweep.status_code == 202, sweep.text
    children = [client.get(f"/v1/audits/{c['audit_id']}").json() for c in sweep.json()["children"]]
    assert {c["request"]["dataset"] for c in children} == {second["id"]}

    # another tenant has no dataset of that name: the same 422 as any unknown name
    with_bob = {"Authorization": f"Bearer {make_key('bob')}"}
    before = client.get("/v1/audits", headers=with_bob).json()["audits"]
    refused = client.post(
        "/v1/audits", json=white_box_request("support", 2, 2, secret="continuation"), headers=with_bob
    )
    assert refused.status_code == 422
    error = refused.json()["error"]
    assert error["details"][0]["path"] == "$.dataset" and "support" in error["message"]
    assert client.get("/v1/audits", headers=with_bob).json()["audits"] == before == []


def test_an_unknown_name_is_422_naming_the_field_and_nothing_is_stored(client) -> None:
    refused = client.post("/v1/audits", json=white_box_request("no-such-set", 2, 2, secret="continuation"))
    assert refused.status_code == 422
    assert refused.json()["error"]["details"][0]["path"] == "$.dataset"
    assert refused.json()["error"]["reason"] == "UNKNOWN_DATASET"
    assert client.get("/v1/audits").json()["audits"] == []
    plan = client.post("/v1/audits/plan", json=white_box_request("no-such-set", 2, 2, secret="continuation"))
    assert plan.status_code == 422 and plan.json()["error"]["details"][0]["path"] == "$.dataset"


@pytest.mark.parametrize("name", ["sst2", "synthetic_records", "0123456789abcdef0123456789abcdef"])
def test_a_name_that_would_mean_something_else_is_refused(client, name: str) -> None:
    response = client.post("/v1/datasets", files={"file": ("x.jsonl", _jsonl(12, "x"))}, data={"name": name})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["details"][0]["path"] == "name"
    assert client.get("/v1/datasets").json()["datasets"] == []


def test_a_schedule_keeps_the_name_so_each_run_takes_the_newest_version(client) -> None:
    _upload(client, "nightly")
    body = {"request": white_box_request("nightly", 2, 2, secret="continuation"), "interval_seconds": 86400}
    created = client.post("/v1/schedules", json=body)
    assert created.status_code == 201, created.text
    assert created.json()["body"]["dataset"] == "nightly"
