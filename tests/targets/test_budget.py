"""Budgets on the real app against a real counting target: every cap (max_calls, max_seconds, the server's
default) stops an endpoint audit the same way — the C1/C0 pairs answered before it kept and judged
(inconclusive: budget), `stopped` and `spent` filled with the calls counted at the target, the messages free
of wall-clock numbers — inside the first 100 trials too, and a resume re-issues none of the calls; the
spend after a stop counts the calls that were in flight; only an audit with no pair fails, naming the cap;
plans count the cap; a model audit that cannot fit its prompts in max_calls fails naming the cap."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.audit.kinds import mia
from app.audit.mechanisms import http_endpoint
from app.audit.runtime import AuditError, no_progress
from app.audit.standalone import local_context
from testkit.client import wait_for
from testkit.target_server import Target, serve

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
    # C1 and C0 calls interleaved: 125 pairs, and the 251st call is not made
    assert target.answered == result["spent"]["calls"] == result["endpoint_calls"] == 250
    assert result["stopped"]["cap"] == "max_calls" and result["stopped"]["trials"] == result["trials"] == 125
    assert result["black_box"]["counts"]["tp"] + result["black_box"]["counts"]["fn"] == 125
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


def science(result: dict) -> dict:
    """What a stopped audit measured, concluded and said (not the seconds it took)."""
    keys = ("black_box", "verdict", "verdict_reason", "headline", "stopped", "trials", "budget")
    return {k: result.get(k) for k in keys} | {"calls": result["spent"]["calls"]}


def test_a_stop_inside_the_first_100_trials_keeps_its_pairs_for_every_cap_alike(app_client, make_key) -> None:
    """trials 100, max_calls 130 (the request's or the server's default) and 73: the pairs answered before
    the cap are kept — 65 and 36 — and judged; two identical stops read alike (no wall time in a message)."""
    runs = []
    for default, budget in (
        (None, {"max_calls": 130}),
        ({"max_calls": 130}, None),
        (None, {"max_calls": 73}),
    ):
        target = Target()
        with (
            serve(target.app()) as url,
            app_client(endpoint_allowlist=[url + "/"], default_budget=default) as c,
        ):
            c.headers["Authorization"] = f"Bearer {make_key('alice')}"
            extra = {"budget": budget} if budget else {}
            done = wait_for(
                c.get, c.post("/v1/audits", json=endpoint_body(url + "/", 100, **extra)).json()["id"]
            )
        assert done["state"] == "SUCCEEDED", done["error"]
        result = done["result"]
        assert target.answered == result["spent"]["calls"] == result["endpoint_calls"]
        runs.append(result)
    request_cap, default_cap, odd = runs
    assert (
        request_cap["trials"] == request_cap["stopped"]["trials"] == 65
        and request_cap["spent"]["calls"] == 130
    )
    assert request_cap["stopped"]["message"] == "budget: max_calls = 130 reached"
    assert request_cap["verdict"] == "inconclusive" and request_cap["headline"].startswith(
        "Inconclusive (budget)"
    )
    assert request_cap["verdict_reason"].startswith(
        "budget: max_calls = 130 reached; judged on the 65 trials"
    )
    assert science(default_cap) == science(request_cap)  # the operator's default stops the same way
    # 73 calls: 36 pairs and C1's 37th call, made (the cap allows it) and kept for a resume
    assert odd["trials"] == 36 and odd["spent"]["calls"] == odd["endpoint_calls"] == 73
    for result in runs:  # an endpoint audit has no model calls
        assert not {"llm_calls", "llm_forward_passes", "distinct_prompts"} & set(result)


def test_max_seconds_stops_mid_audit_with_its_trials_and_the_resume_re_issues_none(
    app_client, make_key
) -> None:
    """trials 400 at 10 ms a call, max_seconds 4: the audit stops after the pairs answered by then (not a
    multiple of 100), SUCCEEDED and inconclusive (budget) with stopped and spent; the bounds after the stop
    finish although the clock is past the cap; resumed without the budget, it sends only the rest."""
    target = Target(delay=0.01)
    with serve(target.app()) as url, app_client(endpoint_allowlist=[url + "/"]) as client:
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        body = endpoint_body(url + "/", 400, budget={"max_seconds": 4})
        first = wait_for(client.get, client.post("/v1/audits", json=body).json()["id"], timeout=120)
        assert first["state"] == "SUCCEEDED", first["error"]
        result, answered = first["result"], target.answered
        assert result["stopped"] == {
            "reason": "budget",
            "cap": "max_seconds",
            "message": "budget: max_seconds = 4 reached",
            "trials": result["trials"],
        }
        assert 0 < result["trials"] < 400 and 2 * result["trials"] <= answered <= 2 * result["trials"] + 1
        assert result["spent"]["calls"] == result["endpoint_calls"] == answered
        assert result["spent"]["seconds"] >= 4 and result["budget"]["max_seconds"] == 4
        assert (
            result["verdict"] == "inconclusive"
            and "budget: max_seconds = 4 reached" in result["verdict_reason"]
        )
        resumed = client.post(f"/v1/audits/{first['id']}/resume", json={"budget": None})
        done = wait_for(client.get, resumed.json()["id"], timeout=120)
    assert done["state"] == "SUCCEEDED", done["error"]
    assert done["result"]["endpoint_replayed"] == answered and done["result"]["trials"] == 400
    assert done["result"]["endpoint_calls"] == 800 - answered and done["result"]["stopped"] is None
    assert sorted(target.seen.values()) == [400, 400]  # C1's body and C0's, each call answered once


def test_the_spend_after_a_stop_counts_the_calls_in_flight(app_client, make_key) -> None:
    """4 calls in flight, max_calls 3: the stop is seen while 3 calls are out; the result's spend, read
    once they are back, is 3 (one pair kept). max_calls 1: no pair, so the audit fails naming the cap and
    the call it made."""
    target = Target(delay=0.2)
    with serve(target.app()) as url, app_client(endpoint_allowlist=[url + "/"]) as client:
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"

        def run(cap: int) -> dict:
            body = endpoint_body(url + "/", 20, budget={"max_calls": cap})
            body["mechanism"]["endpoint"]["max_concurrency"] = 4
            return wait_for(client.get, client.post("/v1/audits", json=body).json()["id"], timeout=120)

        three = run(3)
        assert three["state"] == "SUCCEEDED", three["error"]
        assert target.answered == three["result"]["spent"]["calls"] == three["result"]["endpoint_calls"] == 3
        assert three["result"]["trials"] == 1 and three["result"]["verdict"] == "inconclusive"
        one = run(1)
    assert one["state"] == "FAILED" and target.answered == 4
    assert one["error"]["message"] == (
        "budget: max_calls = 1 reached before the audit finished a trial on each side (spent: calls 1, tokens 0)"
    )


def test_a_plan_counts_the_cap_and_the_run_makes_what_it_said(app_client, make_key) -> None:
    """trials 200, max_calls 250: the plan says 250 calls, exact, beside the full run's 400, and the run
    makes 250; under max_seconds the calls are an upper bound; an endpoint plan has no model-call fields."""
    target = Target()
    with serve(target.app()) as url, app_client(endpoint_allowlist=[url + "/"]) as client:
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        body = endpoint_body(url + "/", 200, budget={"max_calls": 250}, utility_queries=5)
        plan = client.post("/v1/audits/plan", json=body).json()
        assert plan["calls"] == {
            "model": 0,
            "endpoint": 250,
            "exact": True,
            "full_run": {"model": 0, "endpoint": 400},
        }
        assert [n for n in plan["notes"] if n.startswith("budget.max_calls = 250 is below the planned 400")]
        assert not [n for n in plan["notes"] if "utility" in n]  # an endpoint's utility makes no call
        assert "llm_calls" not in plan["power"] and "llm_calls_needed" not in plan["power"]
        assert "model_seconds_per_call" not in plan["time"]
        done = wait_for(client.get, client.post("/v1/audits", json=body).json()["id"], timeout=120)
        assert done["state"] == "SUCCEEDED" and target.answered == done["result"]["spent"]["calls"] == 250
        timed = client.post("/v1/audits/plan", json=endpoint_body(url + "/", 200, budget={"max_seconds": 1}))
        assert timed.json()["calls"]["exact"] is False and timed.json()["calls"]["endpoint"] == 400
        free = client.post("/v1/audits/plan", json=endpoint_body(url + "/", 200)).json()
        assert free["calls"] == {"model": 0, "endpoint": 400, "exact": True}


def local_audit(url: str, trials: int, **extra: object) -> dict:
    return mia.run(
        mia.Request.model_validate(endpoint_body(url + "/", trials, **extra)),
        local_context(progress=no_progress),
    ).stored()


def test_a_429_stretch_is_waited_out_and_its_end_says_the_retries_ran_out(monkeypatch) -> None:
    """retries 0: six 429s in a row (Retry-After 0.2 s) are waited out, whatever the retry count, to the
    result of a run without them; a budget's max_seconds stops a 429 stretch cleanly, keeping the pairs
    finished; without one, past RATE_LIMIT_PATIENCE the error says the retries ran out and for how long."""
    reference_target, target = Target(), Target(limited=6, retry_after=0.2)
    with serve(reference_target.app()) as reference_url, serve(target.app()) as url:
        reference = local_audit(reference_url, 20)
        waited = local_audit(url, 20)
    assert target.throttled == 6 and target.answered == waited["endpoint_calls"] == 40
    assert waited["black_box"] == reference["black_box"] and waited["verdict"] == reference["verdict"]

    target = Target(limited_after=30, retry_after=0.2)  # rate limited for good after 30 answers
    with serve(target.app()) as url:
        stopped = local_audit(url, 100, budget={"max_seconds": 2})
        assert stopped["stopped"]["cap"] == "max_seconds" and stopped["trials"] == 15
        assert stopped["spent"]["calls"] == target.answered == 30 and target.throttled >= 2
        monkeypatch.setattr(http_endpoint, "RATE_LIMIT_PATIENCE", 1.0)
        with pytest.raises(
            AuditError, match=r"HTTP 429, rate limited\); its retries ran out: \d+ tries over"
        ):
            local_audit(url, 100)
