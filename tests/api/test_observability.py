"""Request ids in and out and into the audit's log lines (JSON), and the Prometheus figures: HTTP latency
histograms, audit run time by kind, violations and verdicts counted — on SQLite and PostgreSQL."""

from __future__ import annotations

import io
import json
import logging

from prometheus_client.parser import text_string_to_metric_families

from app.api.state import state_of
from app.observability import log_handler
from testkit.client import bound_request, verdict_request, wait_for


def test_request_id_is_echoed_or_made_and_reaches_the_audit_log(client) -> None:
    stream = io.StringIO()
    handler = log_handler(stream, "json")
    root = logging.getLogger()
    root.addHandler(handler)
    old_level = root.level
    root.setLevel(logging.INFO)
    try:
        made = client.get("/healthz")
        assert len(made.headers["X-Request-ID"]) >= 16
        response = client.post("/v1/audits", json=bound_request(), headers={"X-Request-ID": "ci-run-42"})
        assert response.headers["X-Request-ID"] == "ci-run-42"
        audit = wait_for(client.get, response.json()["id"])
        assert (
            client.get("/healthz", headers={"X-Request-ID": "bad id with spaces"}).headers["X-Request-ID"]
            != "bad id with spaces"
        )
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    from app.db.models import Audit
    from app.integrations.webhooks import audit_data

    with state_of(client.app).session_factory() as session:  # webhook deliveries carry it too
        assert audit_data(session.get(Audit, audit["id"]))["request_id"] == "ci-run-42"
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    runner = [line for line in lines if line["logger"] == "app.jobs.runner"]
    assert runner and all(line["audit_id"] == audit["id"] for line in runner)
    assert all(line.get("request_id") == "ci-run-42" for line in runner)
    assert any("tenant" in line for line in runner)
    assert all({"time", "level", "message"} <= set(line) for line in lines)


def _families(client) -> dict:
    token = state_of(client.app).settings.metrics_token
    text = client.get("/metrics", headers={"Authorization": f"Bearer {token}"}).text
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_metrics_have_http_latency_audit_duration_and_violations(client) -> None:
    unclaimed = client.post("/v1/audits", json=bound_request()).json()  # leaks, nothing claimed
    leaky = client.post("/v1/audits", json=bound_request(epsilon=0.05)).json()
    for audit in (unclaimed, leaky):
        wait_for(client.get, audit["id"])
    assert client.get(f"/v1/audits/{leaky['id']}").json()["result"]["violation"] is True
    families = _families(client)
    latency = families["http_request_duration_seconds"]
    assert any(
        s.labels.get("handler") == "/v1/audits" and s.labels.get("method") == "POST" for s in latency.samples
    )
    duration = families["iclaudit_audit_duration_seconds"]
    count = next(
        s.value
        for s in duration.samples
        if s.name.endswith("_count") and s.labels == {"kind": "bound", "state": "SUCCEEDED"}
    )
    assert count == 2
    inf = next(
        s.value for s in duration.samples if s.labels.get("le") == "+Inf" and s.labels["kind"] == "bound"
    )
    assert inf == 2
    violations = {s.labels["kind"]: s.value for s in families["iclaudit_audit_violations"].samples}
    assert violations == {"bound": 1}


def test_metrics_count_audits_by_verdict(client) -> None:
    """`iclaudit_audit_verdicts_total{kind,verdict}`: succeeded audits per verdict, read from the stored
    results' `verdict` JSON field in SQL (on either database); every verdict of a kind that has one is
    listed, 0 included."""
    assert _families(client)["iclaudit_audit_verdicts"].samples == []
    for outcome, n in (("violation", 1), ("leak", 2), ("consistent", 1)):
        for _ in range(n):
            wait_for(client.get, client.post("/v1/audits", json=verdict_request(outcome)).json()["id"])
    families = _families(client)
    counted = {
        (s.labels["kind"], s.labels["verdict"]): s.value
        for s in families["iclaudit_audit_verdicts"].samples
        if s.name == "iclaudit_audit_verdicts_total"
    }
    assert counted == {
        ("bound", "violation"): 1,
        ("bound", "leak"): 2,
        ("bound", "inconclusive"): 0,
        ("bound", "consistent"): 1,
    }
    violations = {s.labels["kind"]: s.value for s in families["iclaudit_audit_violations"].samples}
    assert violations == {"bound": 1}  # the older counter agrees
