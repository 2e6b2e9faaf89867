"""Idempotency-Key on POST /v1/audits and /v1/datasets (sweeps: test_sweeps.py), on SQLite and PostgreSQL."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from integrations.conftest import live_server

from app.config import Settings
from testkit.client import bound_request

# the logic of this test does not depend on the database; PostgreSQL runs the concurrency-bearing ones
SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def _count(client: TestClient) -> int:
    return len(client.get("/v1/audits", params={"page_size": 500}).json()["audits"])


def test_a_retry_with_the_same_key_gets_the_first_audit_and_its_status(client: TestClient) -> None:
    key = {"Idempotency-Key": "retry-1"}
    first = client.post("/v1/audits", json=bound_request(), headers=key)
    again = client.post("/v1/audits", json=bound_request(), headers=key)
    assert (first.status_code, again.status_code) == (202, 202)
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first.headers
    assert again.headers["Location"] == f"/v1/audits/{first.json()['id']}"
    # the key order and spacing of the body do not matter; the parsed body does
    reordered = dict(reversed(list(bound_request().items())))
    assert client.post("/v1/audits", json=reordered, headers=key).json()["id"] == first.json()["id"]
    assert _count(client) == 1
    # without a key every POST is a new audit
    assert client.post("/v1/audits", json=bound_request()).json()["id"] != first.json()["id"]
    assert _count(client) == 2


@SQLITE_ONLY
def test_the_same_key_with_another_body_is_422_and_stores_nothing(client: TestClient) -> None:
    key = {"Idempotency-Key": "k-body"}
    client.post("/v1/audits", json=bound_request(), headers=key)
    other = client.post("/v1/audits", json=bound_request(confidence=0.9), headers=key)
    assert other.status_code == 422
    assert other.json()["error"]["details"][0]["path"] == "header.Idempotency-Key"
    assert "different request body" in other.json()["error"]["message"]
    assert _count(client) == 1


@SQLITE_ONLY
def test_keys_are_per_tenant(client: TestClient, make_key: Any) -> None:
    key = {"Idempotency-Key": "shared-name"}
    mine = client.post("/v1/audits", json=bound_request(), headers=key).json()["id"]
    bob = {"Authorization": f"Bearer {make_key('bob')}", **key}
    theirs = client.post("/v1/audits", json=bound_request(), headers=bob)
    assert theirs.status_code == 202 and "Idempotent-Replayed" not in theirs.headers
    assert theirs.json()["id"] != mine


@SQLITE_ONLY
def test_a_key_expires_after_the_configured_window(app_client: Any, make_key: Any) -> None:
    with app_client(idempotency_ttl_seconds=0.5) as client:
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        key = {"Idempotency-Key": "short-lived"}
        first = client.post("/v1/audits", json=bound_request(), headers=key).json()["id"]
        assert client.post("/v1/audits", json=bound_request(), headers=key).json()["id"] == first
        time.sleep(0.6)
        later = client.post("/v1/audits", json=bound_request(), headers=key)
        assert later.status_code == 202 and later.json()["id"] != first
        assert "Idempotent-Replayed" not in later.headers


def test_a_dataset_upload_retried_with_its_key_is_stored_once(client: TestClient) -> None:
    rows = {"name": "tiny", "rows": [{"text": "good", "label": "pos"}, {"text": "bad", "label": "neg"}] * 3}
    key = {"Idempotency-Key": "upload-1"}
    first = client.post("/v1/datasets", json=rows, headers=key)
    again = client.post("/v1/datasets", json=rows, headers=key)
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json()["id"] == first.json()["id"] and again.headers["Idempotent-Replayed"] == "true"
    changed = client.post("/v1/datasets", json={**rows, "name": "other"}, headers=key)
    assert changed.status_code == 422
    assert len(client.get("/v1/datasets").json()["datasets"]) == 1


def test_twenty_concurrent_duplicates_create_one_audit(settings: Settings, make_key: Any) -> None:
    """20 threads POST the same key at once to a real uvicorn: one audit, 20 answers naming it."""
    headers = {"Authorization": f"Bearer {make_key('alice')}", "Idempotency-Key": "burst"}
    with live_server(settings) as base:
        httpx.get(
            f"{base}/v1/audits", headers={"Authorization": headers["Authorization"]}
        )  # key verified once

        def post(_: int) -> httpx.Response:
            with httpx.Client(base_url=base, timeout=60) as http:
                return http.post("/v1/audits", json=bound_request(), headers=headers)

        with ThreadPoolExecutor(20) as pool:
            answers = list(pool.map(post, range(20)))
        with httpx.Client(base_url=base, headers={"Authorization": headers["Authorization"]}) as http:
            listed = http.get("/v1/audits", params={"page_size": 500}).json()["audits"]
    assert [a.status_code for a in answers] == [202] * 20
    assert len({a.json()["id"] for a in answers}) == 1
    assert sum("Idempotent-Replayed" in a.headers for a in answers) == 19
    assert [a["id"] for a in listed] == [answers[0].json()["id"]]
