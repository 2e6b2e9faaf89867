"""Black-box audits of a deployed DP-ICL system over real HTTP (uvicorn on 127.0.0.1, no mocks)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.audit.kinds import mia
from app.audit.mechanisms.http_endpoint import EndpointCall, fill_body, read_path
from app.audit.runtime import AuditError
from testkit.dp_icl_server import deployed_private_voting, serve

CALLS = 1000  # real calls per context


def endpoint_audit(ctx, url: str, *, trials: int = CALLS, **endpoint) -> dict:
    body = {
        "kind": "mia",
        "dataset": "ag_news",
        "seed": 0,
        "epsilon": 1.0,
        "estimator": "direct",
        "trials": trials,
        "mechanism": {
            "name": "http_endpoint",
            "partitions": 4,
            "shots_per_partition": 2,
            "endpoint": {"url": url, "answer_path": "$.choices[0].text", **endpoint},
        },
        "attack": {"name": "canary_prompt", "threat_model": "black_box"},
    }
    return mia.run(mia.Request.model_validate(body), ctx).stored()


@pytest.mark.parametrize("bug", [None, "noise_divided_by_t"])
def test_deployed_endpoint_verdict_is_assumption_free(oracle_ctx, bug) -> None:
    """An endpoint is not a known Gaussian mechanism, so the verdict uses the assumption-free bound. The
    σ/T bug's released label alone is only ε ≈ 1.24 at T = 4 (TPR 0.215 / FPR 0.062), which 1,000 calls
    cannot resolve from the claim of 1; the GDP route would read ≈ 2.3 into the same counts."""
    with serve(deployed_private_voting(epsilon=1.0, bug=bug, seed=7)) as url:
        r = endpoint_audit(oracle_ctx, url + "/")
    assert r["violation"] is False and r["assumption"] == "none"
    assert r["endpoint_calls"] == 2 * CALLS and "llm_forward_passes" not in r
    assert r["epsilon_theory"] == 1.0 and "white_box" not in r
    bb = r["black_box"]
    assert bb["assumption"] == "none" and bb["confidence"] == r["confidence"]["stated"] == 0.95
    assert bb["tpr"] > bb["fpr"]  # the canary moves the released answer towards "1" either way
    assert bb["epsilon_empirical_assumption_free"] < bb["epsilon_empirical"]
    if bug:
        assert bb["epsilon_empirical"] > 1.5  # what the GDP route would have flagged


def test_retries_ride_out_a_busy_endpoint_and_failures_are_reported(oracle_ctx) -> None:
    with serve(deployed_private_voting(epsilon=1.0, seed=1)) as url:
        r = endpoint_audit(oracle_ctx, url + "/flaky", trials=10, retries=1)
        assert r["endpoint_calls"] == 20
        with pytest.raises(AuditError, match="HTTP 503"):
            endpoint_audit(oracle_ctx, url + "/flaky", trials=10, retries=0)
        with pytest.raises(AuditError, match="no answer at 'answer'"):
            endpoint_audit(oracle_ctx, url + "/", trials=5, answer_path="answer")
    with pytest.raises(AuditError, match="ConnectError"):
        endpoint_audit(oracle_ctx, url + "/", trials=2, retries=0, timeout_s=2)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"attack": {"name": "canary_prompt", "threat_model": "white_box"}}, "threat_model"),
        ({"attack": {"name": "canary_prompt", "threat_model": "both"}}, "threat_model"),
        ({"estimator": "bootstrap"}, "estimator"),
        ({"attack": {"name": "inquiry", "threat_model": "black_box"}}, "attack.name"),
        ({"mechanism": {"name": "http_endpoint"}}, "endpoint"),
        ({"mechanism": {"name": "private_voting", "endpoint": {"url": "http://x"}}}, "endpoint"),
        ({"mechanism": {"name": "http_endpoint", "endpoint": {"url": "ftp://x"}}}, "url"),
    ],
)
def test_endpoint_requests_are_validated(change, field) -> None:
    body = {
        "kind": "mia",
        "dataset": "ag_news",
        "estimator": "direct",
        "mechanism": {"name": "http_endpoint", "endpoint": {"url": "http://127.0.0.1:9/"}},
        "attack": {"name": "canary_prompt", "threat_model": "black_box"},
        **change,
    }
    with pytest.raises(ValidationError) as err:
        mia.Request.model_validate(body)
    assert field.split(".")[-1] in str(err.value)


def test_body_template_and_answer_path() -> None:
    call = EndpointCall(("Text: a", "Text: b"), "Is it there?")
    body = {"ctx": "{context}", "messages": [{"content": "Q: {query}\n{context}"}], "n": 1}
    assert fill_body(body, call) == {
        "ctx": ["Text: a", "Text: b"],
        "messages": [{"content": "Q: Is it there?\nText: a\n\nText: b"}],
        "n": 1,
    }
    reply = {"choices": [{"message": {"content": "1"}}]}
    assert read_path(reply, "choices.0.message.content") == "1"
    assert read_path(reply, "$.choices[0].message.content") == "1"
    with pytest.raises(KeyError):
        read_path(reply, "choices.1.text")
