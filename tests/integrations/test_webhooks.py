"""Webhooks (Standard Webhooks) on the embedded default, SQLite and PostgreSQL: a receiver on 127.0.0.1
(allow-listed) gets each event once, signed so that `standardwebhooks` verifies it, and gets it after an
outage; targets are checked by app/egress.py."""

from __future__ import annotations

import os
import time
from collections import Counter
from typing import Any

import pytest
from fastapi.testclient import TestClient
from integrations.conftest import Receiver
from standardwebhooks import Webhook

from app.audit.stats.verdict import OUTCOMES
from app.integrations.webhooks import EVENT_TYPES
from testkit.client import (
    bound_request,
    long_mia_request,
    underpowered_mia_request,
    verdict_request,
    wait_for,
)
from testkit.servers import free_port

# the outage the receiver has in test_a_delivery_survives_a_receiver_outage; the 30 s case is run as
# ICLAUDIT_TEST_OUTAGE_SECONDS=30 ICLAUDIT_TEST_BACKOFF_SECONDS=2 (docs/results/integrations.md)
OUTAGE_SECONDS = float(os.environ.get("ICLAUDIT_TEST_OUTAGE_SECONDS", "1.5"))
BACKOFF_SECONDS = float(os.environ.get("ICLAUDIT_TEST_BACKOFF_SECONDS", "0.2"))

# the logic of this test does not depend on the database; PostgreSQL runs the concurrency-bearing ones
SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def violating_mia() -> dict[str, Any]:
    """A private-voting mechanism with a planted bug (noise divided by the number of partitions): the
    audit measures ε above the claimed 1 (a violation)."""
    return {
        "kind": "mia",
        "dataset": "ag_news",
        "model": "oracle",
        "mechanism": {
            "name": "private_voting",
            "partitions": 4,
            "shots_per_partition": 1,
            "bug": "noise_divided_by_t",
        },
        "epsilon": 1.0,
        "attack": {"name": "inquiry", "threat_model": "black_box"},
        "llm_calls": 20,
        "trials": 2000,
        "labels": {"model-version": "v7", "git.sha": "abc123"},
    }


def failing_endpoint_mia(port: int) -> dict[str, Any]:
    """An http_endpoint audit of an allow-listed address where nothing listens: it ends FAILED."""
    return {
        "kind": "mia",
        "dataset": "ag_news",
        "mechanism": {
            "name": "http_endpoint",
            "partitions": 2,
            "shots_per_partition": 1,
            "endpoint": {
                "url": f"http://127.0.0.1:{port}/",
                "body": {"q": "{query}"},
                "answer_path": "$.a",
                "timeout_s": 1,
                "retries": 0,
            },
        },
        "epsilon": 1,
        "attack": {"name": "canary_prompt", "threat_model": "black_box"},
        "estimator": "direct",
        "trials": 10,
    }


def deliveries(client: TestClient, webhook_id: str) -> list[dict[str, Any]]:
    return client.get(f"/v1/webhooks/{webhook_id}/deliveries").json()["deliveries"]


def test_each_event_reaches_the_receiver_once_signed(
    app_client: Any, make_key: Any, receiver: Receiver
) -> None:
    closed = free_port()
    with app_client(endpoint_allowlist=[f"http://127.0.0.1:{closed}/"]) as client:
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        created = client.post("/v1/webhooks", json={"url": receiver.url, "description": "ci"})
        assert created.status_code == 201, created.text
        hook = created.json()
        assert hook["secret"].startswith("whsec_") and hook["events"] == []
        assert "secret" not in client.get(f"/v1/webhooks/{hook['id']}").json()
        assert [w["id"] for w in client.get("/v1/webhooks").json()["webhooks"]] == [hook["id"]]
        notify_secret = client.get("/v1/webhooks/notify-secret").json()["secret"]
        assert client.get("/v1/webhooks/notify-secret").json()["secret"] == notify_secret

        # the bound example claims nothing and shows leakage: audit.leak, to the endpoint and to notify
        leaked = client.post("/v1/audits", json=bound_request(notify=receiver.url + "?via=notify")).json()
        ok = client.post("/v1/audits", json=verdict_request("consistent")).json()
        failed = client.post("/v1/audits", json=failing_endpoint_mia(closed)).json()
        violated = client.post("/v1/audits", json=violating_mia()).json()
        cancelled = client.post("/v1/audits", json=long_mia_request()).json()
        assert client.post(f"/v1/audits/{cancelled['id']}/cancel").status_code == 200
        for audit, state in (
            (leaked, "SUCCEEDED"),
            (ok, "SUCCEEDED"),
            (failed, "FAILED"),
            (violated, "SUCCEEDED"),
            (cancelled, "CANCELLED"),
        ):
            assert wait_for(client.get, audit["id"], (state,), timeout=60)["state"] == state

        got = receiver.wait_for(9)
        time.sleep(1.0)  # ten more ticks: nothing is sent twice
        assert len(receiver.got) == 9
        by_id = {}
        for message in got:
            try:
                payload = Webhook(hook["secret"]).verify(message.body, message.headers)
                to = "endpoint"
            except Exception:
                payload = Webhook(notify_secret).verify(message.body, message.headers)
                to = "notify"
            by_id[message.headers["webhook-id"]] = (to, payload)
        assert len(by_id) == 9  # every delivery its own webhook-id
        seen = Counter((to, p["type"], p["data"]["id"]) for to, p in by_id.values())
        assert seen == Counter(
            {
                ("endpoint", "audit.succeeded", leaked["id"]): 1,
                ("notify", "audit.succeeded", leaked["id"]): 1,
                ("endpoint", "audit.leak", leaked["id"]): 1,
                ("notify", "audit.leak", leaked["id"]): 1,
                ("endpoint", "audit.succeeded", ok["id"]): 1,
                ("endpoint", "audit.failed", failed["id"]): 1,
                ("endpoint", "audit.succeeded", violated["id"]): 1,
                ("endpoint", "audit.violation", violated["id"]): 1,
                ("endpoint", "audit.cancelled", cancelled["id"]): 1,
            }
        )
        violation = next(p for _, p in by_id.values() if p["type"] == "audit.violation")["data"]
        assert violation["labels"] == {"model-version": "v7", "git.sha": "abc123"}
        assert violation["verdict"]["violation"] is True and violation["verdict"]["epsilon_theory"] == 1.0
        assert violation["verdict"]["epsilon_lower"] > 1.0
        assert violation["verdict"]["outcome"] == "violation"
        assert violation["verdict"]["headline"].endswith("against a claimed 1: violation")
        # the verdict rides on every audit event: outcome, headline, epsilon_detectable
        events = {(p["type"], p["data"]["id"]): p["data"] for to, p in by_id.values() if to == "endpoint"}
        for audit, kind in ((leaked, "audit.leak"), (leaked, "audit.succeeded")):
            verdict = events[(kind, audit["id"])]["verdict"]
            assert verdict["outcome"] == "leak" and verdict["violation"] is None, kind
            assert (
                verdict["headline"].startswith("The system leaks: ε ≥ 0.404") and verdict["epsilon_lower"] > 0
            )
        passed = events[("audit.succeeded", ok["id"])]["verdict"]
        stored = client.get(f"/v1/audits/{ok['id']}").json()["result"]
        assert passed["outcome"] == "consistent" and passed["violation"] is False
        assert passed["headline"] == stored["headline"] and passed["headline"].startswith("Consistent")
        assert passed["epsilon_detectable"] == stored["epsilon_detectable"] >= 1  # at least its claim
        assert events[("audit.succeeded", violated["id"])]["verdict"]["outcome"] == "violation"
        nothing = {"outcome": None, "headline": None, "epsilon_detectable": None, "violation": None}
        for audit, kind in ((failed, "audit.failed"), (cancelled, "audit.cancelled")):
            assert events[(kind, audit["id"])]["verdict"].items() >= nothing.items()

        log = deliveries(client, hook["id"])
        assert len(log) == 7 and {(d["state"], d["attempts"], d["last_status"]) for d in log} == {
            ("SUCCEEDED", 1, 204)
        }
        one = log[0]
        again = client.post(f"/v1/webhooks/{hook['id']}/deliveries/{one['id']}/redeliver")
        assert again.status_code == 202
        receiver.wait_for(10)
        assert receiver.got[9].headers["webhook-id"] == one["id"]
        Webhook(hook["secret"]).verify(receiver.got[9].body, receiver.got[9].headers)

        assert client.delete(f"/v1/webhooks/{hook['id']}").status_code == 204
        assert client.get(f"/v1/webhooks/{hook['id']}/deliveries").status_code == 404


def test_a_delivery_survives_a_receiver_outage(app_client: Any, make_key: Any, receiver: Receiver) -> None:
    with app_client(webhook_backoff_seconds=BACKOFF_SECONDS) as client:
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        hook = client.post("/v1/webhooks", json={"url": receiver.url, "events": ["audit.succeeded"]}).json()
        receiver.down()
        audit = client.post("/v1/audits", json=bound_request()).json()
        wait_for(client.get, audit["id"], ("SUCCEEDED",))
        down_since = time.monotonic()
        while time.monotonic() - down_since < OUTAGE_SECONDS:
            time.sleep(0.1)
        failing = deliveries(client, hook["id"])[0]
        assert (
            failing["state"] == "PENDING"
            and failing["attempts"] >= 2
            and "ConnectError" in failing["last_error"]
        )
        receiver.up()
        got = receiver.wait_for(1, timeout=OUTAGE_SECONDS + 60)
        payload = Webhook(hook["secret"]).verify(got[0].body, got[0].headers)
        assert payload["type"] == "audit.succeeded" and payload["data"]["id"] == audit["id"]
        time.sleep(0.5)
        assert len(receiver.got) == 1
        done = deliveries(client, hook["id"])[0]
        assert (
            done["state"] == "SUCCEEDED"
            and done["attempts"] >= failing["attempts"]
            and done["id"] == failing["id"]
        )


@SQLITE_ONLY
def test_internal_targets_are_refused_unless_allow_listed(client: TestClient, receiver: Receiver) -> None:
    for url in (
        "http://169.254.169.254/latest/meta-data",
        "http://10.0.0.7/hook",
        f"http://127.0.0.1:{free_port()}/",
    ):
        refused = client.post("/v1/webhooks", json={"url": url})
        assert refused.status_code == 422 and refused.json()["error"]["details"][0]["path"] == "$.url", url
    assert client.post("/v1/webhooks", json={"url": "https://user:pw@example.com/"}).status_code == 422
    bad_notify = client.post("/v1/audits", json=bound_request(notify="http://192.168.1.1/"))
    assert bad_notify.status_code == 422 and bad_notify.json()["error"]["details"][0]["path"] == "$.notify"
    # a name that resolves to loopback passes the URL check but is refused at connect time (the entry
    # names 127.0.0.1 at the receiver's port only)
    hook = client.post("/v1/webhooks", json={"url": f"http://localhost:{free_port()}/hook"}).json()
    client.post("/v1/audits", json=bound_request())
    deadline = time.monotonic() + 30
    while not (log := deliveries(client, hook["id"])) or log[0]["state"] == "PENDING":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert (
        log[0]["state"] == "FAILED"
        and log[0]["last_error"].startswith("refused:")
        and log[0]["attempts"] == 1
    )
    assert receiver.got == []


@pytest.mark.parametrize("events", [["sweep.completed"]])
def test_sweep_completed_is_sent_once(client: TestClient, receiver: Receiver, events: list[str]) -> None:
    hook = client.post("/v1/webhooks", json={"url": receiver.url, "events": events}).json()
    body = {"base": bound_request(), "grid": {"confidence": [0.9, 0.95]}, "labels": {"run": "nightly"}}
    sweep = client.post("/v1/sweeps", json=body).json()
    got = receiver.wait_for(1)
    time.sleep(0.5)
    assert len(receiver.got) == 1
    payload = Webhook(hook["secret"]).verify(got[0].body, got[0].headers)
    assert payload["type"] == "sweep.completed" and payload["data"]["id"] == sweep["id"]
    assert payload["data"]["state"] == "SUCCEEDED" and payload["data"]["labels"] == {"run": "nightly"}
    assert payload["data"]["counts"] == {"SUCCEEDED": 2}
    assert payload["data"]["outcomes"] == {"leak": 2} and payload["data"]["violations"] == 0


@SQLITE_ONLY
def test_audit_leak_is_subscribable_apart_from_violations(client: TestClient, receiver: Receiver) -> None:
    """A webhook for `audit.leak` alone gets the leak (nothing claimed, leakage shown) and nothing for a
    violation, an inconclusive or a consistent audit; every event can be listed, an unknown one is 422."""
    hook = client.post("/v1/webhooks", json={"url": receiver.url, "events": ["audit.leak"]}).json()
    assert hook["events"] == ["audit.leak"]
    made = {o: client.post("/v1/audits", json=verdict_request(o)).json()["id"] for o in OUTCOMES}
    for audit_id in made.values():
        wait_for(client.get, audit_id, ("SUCCEEDED",))
    got = receiver.wait_for(1)
    time.sleep(0.5)
    assert len(receiver.got) == 1
    payload = Webhook(hook["secret"]).verify(got[0].body, got[0].headers)
    assert payload["type"] == "audit.leak" and payload["data"]["id"] == made["leak"]
    assert payload["data"]["verdict"]["outcome"] == "leak" and "schedule_id" not in payload["data"]

    every = client.post("/v1/webhooks", json={"url": receiver.url, "events": list(EVENT_TYPES)})
    assert every.status_code == 201 and every.json()["events"] == list(EVENT_TYPES)
    unknown = client.post("/v1/webhooks", json={"url": receiver.url, "events": ["audit.passed"]})
    assert unknown.status_code == 422 and unknown.json()["error"]["details"][0]["path"].startswith("$.events")


@SQLITE_ONLY
def test_a_chains_payloads_link_each_audit_to_its_next_step(client: TestClient, receiver: Receiver) -> None:
    """`until_answer`: the inconclusive audit's event names the audit that takes its next step
    (`data.followed_by`), and that audit's event names the one it follows (`data.follows`)."""
    hook = client.post("/v1/webhooks", json={"url": receiver.url, "events": ["audit.succeeded"]}).json()
    first = client.post("/v1/audits", json=underpowered_mia_request(max_seconds=300)).json()["id"]
    second = wait_for(client.get, first)["followed_by"]
    wait_for(client.get, second)
    got = receiver.wait_for(2)
    data = {d["id"]: d for d in (Webhook(hook["secret"]).verify(g.body, g.headers)["data"] for g in got)}
    assert (data[first]["follows"], data[first]["followed_by"]) == (None, second)
    assert (data[second]["follows"], data[second]["followed_by"]) == (first, None)
    assert [data[first]["verdict"]["outcome"], data[second]["verdict"]["outcome"]] == [
        "inconclusive",
        "consistent",
    ]


@SQLITE_ONLY
def test_an_inconclusive_audits_payload_carries_its_next_steps(
    client: TestClient, receiver: Receiver
) -> None:
    """`data.next_steps`: what would make the audit answer, as its result holds them (here: 25 trials per
    side cannot resolve a claim of 2; the step names the trials per side that can)."""
    hook = client.post("/v1/webhooks", json={"url": receiver.url, "events": ["audit.succeeded"]}).json()
    audit_id = client.post("/v1/audits", json=verdict_request("inconclusive")).json()["id"]
    done = wait_for(client.get, audit_id, ("SUCCEEDED",))
    (got,) = receiver.wait_for(1)
    payload = Webhook(hook["secret"]).verify(got.body, got.headers)
    steps = payload["data"]["next_steps"]
    assert payload["data"]["verdict"]["outcome"] == "inconclusive"
    assert steps == done["result"]["next_steps"] and "trials per side = " in steps[0]["text"]
