"""Limits (issue 11): 413 before parsing and authentication, 429 with Retry-After per tenant, for writes, for
active audits and for failed authentication (before scrypt), security headers, 405 with Allow."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.config import Settings
from testkit.client import bound_request, wait_for
from testkit.held_endpoint import HeldEndpoint
from testkit.servers import fresh_database


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """SQLite only: the limits sit in front of the database."""
    return fresh_database("sqlite", tmp_path)


def _assert_429(response, setting: str) -> None:
    assert response.status_code == 429, response.text
    assert int(response.headers["Retry-After"]) >= 1
    error = response.json()["error"]
    assert error["status"] == "RESOURCE_EXHAUSTED" and setting in error["message"]


def test_body_over_the_limit_is_413_before_auth_and_parsing(app_client, make_key) -> None:
    with app_client(max_request_bytes=4096) as client:  # no Authorization header at all
        big = b'{"kind": "bound", "scores_in": [' + b"0.5, " * 2000 + b"0.5]}"
        json_type = {"Content-Type": "application/json"}
        response = client.post("/v1/audits", content=big, headers=json_type)  # Content-Length: no read
        assert response.status_code == 413, response.text
        assert "ICLAUDIT_MAX_REQUEST_BYTES" in response.json()["error"]["message"]
        # Chunked, the size shows only while reading, and no body is read before authentication (issue 20)
        chunked = client.post("/v1/audits", content=iter([big[:3000], big[3000:]]), headers=json_type)
        assert chunked.status_code == 401, chunked.text
        key = {"Authorization": f"Bearer {make_key('alice')}"}
        chunked = client.post(
            "/v1/audits", content=iter([big[:3000], big[3000:]]), headers={**json_type, **key}
        )
        assert chunked.status_code == 413 and "ICLAUDIT_MAX_REQUEST_BYTES" in chunked.text
        assert client.post("/v1/audits", json=bound_request()).status_code == 401  # small: on to auth


def test_upload_over_its_limit_is_413(app_client, make_key) -> None:
    with app_client(upload_max_bytes=1000) as client:
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        rows = "".join(
            json.dumps({"text": f"row {i} " * 20, "label": "a" if i % 2 else "b"}) + "\n" for i in range(50)
        )
        response = client.post("/v1/datasets", files={"file": ("big.jsonl", rows.encode())})
        assert (
            response.status_code == 413 and "ICLAUDIT_UPLOAD_MAX_BYTES" in response.json()["error"]["message"]
        )
        assert client.get("/v1/datasets").json()["datasets"] == [] or all(
            d.get("builtin") for d in client.get("/v1/datasets").json()["datasets"]
        )


def test_default_limit_holds_a_bound_audit_of_400k_plus_400k_scores(client) -> None:
    """The default ICLAUDIT_MAX_REQUEST_BYTES is sized by this body (printed: its size in bytes). A stray
    field makes it a quick 422, which shows it passed the body limit and was read."""
    rng = np.random.default_rng(0)
    scores = {
        "scores_in": rng.normal(1.0, 1.0, 400_000).tolist(),
        "scores_out": rng.normal(size=400_000).tolist(),
    }
    raw = json.dumps(bound_request(counts=None, **scores)).encode()
    print(f"bound audit with 400,000 + 400,000 scores: {len(raw):,} bytes as JSON")
    assert len(raw) < Settings().max_request_bytes
    stray = raw[:-1] + b', "colour": "red"}'
    response = client.post("/v1/audits", content=stray, headers={"Content-Type": "application/json"})
    assert response.status_code == 422 and response.json()["error"]["details"][0]["path"] == "$.colour"


def test_tenant_rate_limit_is_429_with_retry_after(app_client, make_key) -> None:
    with app_client(rate_limit="3/minute") as client:
        alice, bob = make_key("alice"), make_key("bob")
        for _ in range(3):
            assert client.get("/v1/audits", headers={"Authorization": f"Bearer {alice}"}).status_code == 200
        _assert_429(
            client.get("/v1/audits", headers={"Authorization": f"Bearer {alice}"}), "ICLAUDIT_RATE_LIMIT"
        )
        assert client.get("/v1/audits", headers={"Authorization": f"Bearer {bob}"}).status_code == 200


def test_write_rate_limit_is_429(app_client, make_key) -> None:
    with app_client(write_rate_limit="2/minute") as client:
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        ids = [client.post("/v1/audits", json=bound_request()).json()["id"] for _ in range(2)]
        _assert_429(client.post("/v1/audits", json=bound_request()), "ICLAUDIT_WRITE_RATE_LIMIT")
        assert client.get(f"/v1/audits/{ids[0]}").status_code == 200  # reads go on
        assert len(client.get("/v1/audits").json()["audits"]) == 2


def test_active_audits_cap_is_429_and_stores_nothing(app_client, make_key) -> None:
    """The active audit is held by testkit/held_endpoint.py, not by its size: it cannot end before
    the second submit on a fast machine."""
    with HeldEndpoint() as gate, app_client(max_active_audits=1, endpoint_allowlist=[gate.url]) as client:
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        running = client.post("/v1/audits", json=gate.request()).json()
        _assert_429(client.post("/v1/audits", json=bound_request()), "ICLAUDIT_MAX_ACTIVE_AUDITS")
        assert [a["id"] for a in client.get("/v1/audits").json()["audits"]] == [running["id"]]
        client.post(f"/v1/audits/{running['id']}/cancel")
        gate.release()
        assert wait_for(client.get, running["id"])["state"] == "CANCELLED"
        assert client.post("/v1/audits", json=bound_request()).status_code == 202


def test_failed_auth_for_a_key_id_is_throttled_before_scrypt(app_client, make_key) -> None:
    with app_client(auth_failure_limit="3/minute", auth_failure_address_limit="") as client:
        used, fresh = make_key("alice"), make_key("alice")
        assert client.get("/v1/audits", headers={"Authorization": f"Bearer {used}"}).status_code == 200
        for key in (used, fresh):
            prefix = key.rsplit("_", 1)[0]
            for _ in range(3):
                wrong = {"Authorization": f"Bearer {prefix}_wrong-secret"}
                assert client.get("/v1/audits", headers=wrong).status_code == 401
            _assert_429(client.get("/v1/audits", headers=wrong), "ICLAUDIT_AUTH_FAILURE_LIMIT")
        # The right secret of a locked key id is refused before it is checked: so no scrypt ran for
        # any refused request. A key that had already authenticated is not locked out by the guessing.
        _assert_429(client.get("/v1/audits", headers={"Authorization": f"Bearer {fresh}"}), "AUTH_FAILURE")
        assert client.get("/v1/audits", headers={"Authorization": f"Bearer {used}"}).status_code == 200


def test_failed_auth_per_address_is_throttled(app_client, make_key) -> None:
    with app_client(auth_failure_address_limit="4/minute") as client:
        for i in range(4):
            assert (
                client.get("/v1/audits", headers={"Authorization": f"Bearer ica_{i:012x}_x"}).status_code
                == 401
            )
        _assert_429(
            client.get("/v1/audits", headers={"Authorization": "Bearer ica_ffffffffffff_x"}),
            "ICLAUDIT_AUTH_FAILURE_ADDRESS_LIMIT",
        )


def test_security_headers_and_allow_on_405(client) -> None:
    for path in ("/v1/audits", "/healthz", "/openapi.json"):
        headers = client.get(path).headers
        assert headers["X-Content-Type-Options"] == "nosniff" and headers["X-Frame-Options"] == "DENY"
        assert headers["Referrer-Policy"] == "no-referrer"
        assert "default-src 'self'" in headers["Content-Security-Policy"]
        assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
    response = client.delete("/v1/audits")
    assert response.status_code == 405 and "GET" in response.headers["Allow"]
    assert response.json()["error"]["status"] == "METHOD_NOT_ALLOWED"


def test_metrics_behind_an_optional_token(app_client) -> None:
    with app_client(metrics_token="s3cret-metrics") as client:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret-metrics"}):
            response = client.get("/metrics", headers=headers)
            assert (
                response.status_code == 401
                and "ICLAUDIT_METRICS_TOKEN" in response.json()["error"]["message"]
            )
        ok = client.get("/metrics", headers={"Authorization": "Bearer s3cret-metrics"})
        assert ok.status_code == 200 and "iclaudit_audits" in ok.text
    with app_client(metrics_token=None) as client:  # no token with auth on: closed (issue 20 L4)
        response = client.get("/metrics")
        assert response.status_code == 403 and "ICLAUDIT_METRICS_TOKEN" in response.json()["error"]["message"]
    with app_client(metrics_token=None, auth_enabled=False) as client:  # auth off: a local server, open
        assert client.get("/metrics").status_code == 200
