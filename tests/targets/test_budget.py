"""Budgets (issue 22 §2) on the real app against a real target: an endpoint audit stops at max_calls with
the calls counted at the target, is judged on the trials it finished (inconclusive: budget), and shows the
spend; the server's default budget is stored with a request that sets none; a model audit that cannot fit
its prompts in max_calls fails naming the cap."""

from __future__ import annotations

import json
from pathlib import Path

from service.client import wait_for
from target_server import Target, serve

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def endpoint_body(url: str, trials: int, **extra: object) -> dict:
    body = json.loads((EXAMPLES / "mia-http-endpoint.json").read_text())
    body["mechanism"]["endpoint"].update(url=url, retries=0, timeout_s=5)
    return body | {"trials": trials, "seed": 4} | extra


def test_endpoint_audit_stops_at_max_calls_with_a_partial_result(app_client, make_key) -> None:
    target = Target()
    with serve(target.app()) as url, app_client(endpoint_allowlist=[url + "/"]) as client:
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        submitted = client.post("/v1/audits", json=endpoint_body(url + "/", 300, budget={"max_calls": 250}))
        assert submitted.status_code == 202, submitted.text
        done = wait_for(client.get, submitted.json()["id"], timeout=120)
    assert done["state"] == "SUCCEEDED", done["error"]
    result = done["result"]
    # chunks of 100 calls per side: C1 100, C0 100, then C1 50 more and the 251st is not made
    assert target.answered == result["spent"]["calls"] == result["endpoint_calls"] == 250
    assert result["stopped"]["cap"] == "max_calls" and result["stopped"]["trials"] == result["trials"] == 100
    assert result["black_box"]["counts"]["tp"] + result["black_box"]["counts"]["fn"] == 100
    assert result["verdict"] == "inconclusive" and "budget: max_calls = 250" in result["verdict_reason"]
    assert result["budget"]["max_calls"] == 250
    assert "calls 250/250" in done["progress"]["message"]


def test_default_budget_is_stored_and_a_model_audit_over_it_fails_naming_the_cap(
    app_client, make_key
) -> None:
    with app_client(default_budget={"max_calls": 2}) as client:
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        body = json.loads((EXAMPLES / "mia-oracle-eps1.json").read_text()) | {"trials": 2000}
        submitted = client.post("/v1/audits", json=body)
        assert submitted.status_code == 202, submitted.text
        assert submitted.json()["request"]["budget"] == {
            "max_calls": 2,
            "max_tokens": None,
            "max_seconds": None,
        }
        done = wait_for(client.get, submitted.json()["id"], timeout=120)
        assert done["state"] == "FAILED" and "budget: max_calls = 2" in done["error"]["message"]
        # a request may lower the default, never lift it (a larger cap keeps the default's)
        for asked, kept in ((50, 2), (1, 1)):
            body["budget"] = {"max_calls": asked}
            submitted = client.post("/v1/audits", json=body)
            assert submitted.status_code == 202, submitted.text
            assert submitted.json()["request"]["budget"]["max_calls"] == kept
