"""/metrics (operator view from the database) and the authenticated /v1/models and /v1/accounting."""

from __future__ import annotations

from app.api.state import state_of
from testkit.client import bound_request, wait_for


def test_metrics_count_audits_by_kind_and_state(client) -> None:
    audit_id = client.post("/v1/audits", json=bound_request()).json()["id"]
    wait_for(client.get, audit_id, ("SUCCEEDED",))
    token = state_of(client.app).settings.metrics_token
    text = client.get("/metrics", headers={"Authorization": f"Bearer {token}"}).text
    assert 'iclaudit_audits{kind="bound",state="SUCCEEDED"} 1.0' in text
    assert 'iclaudit_audits{kind="bound",state="PENDING"} 0.0' in text
    assert "iclaudit_oldest_pending_audit_seconds 0.0" in text


def test_models_and_calculators_need_a_key(client) -> None:
    assert client.get("/v1/models").status_code == 200
    names = {m["name"] for m in client.get("/v1/models").json()["models"]}
    assert {"smollm2-135m-instruct", "oracle"} <= names
    client.headers.pop("Authorization")
    assert client.get("/v1/models").status_code == 401
    assert client.post("/v1/accounting/gaussian", json={"epsilon": 1, "delta": 1e-5}).status_code == 401
