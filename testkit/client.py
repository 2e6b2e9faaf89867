"""Helpers for tests that drive the API: request bodies of real kinds and polling to a state."""

from __future__ import annotations

import json
import time
from typing import Any

from app.audit.kinds.registry import kind_module

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def bound_request(**changes: Any) -> dict[str, Any]:
    """The `bound` kind's own example (counts in, a bound out; no model, no data): cheap and real."""
    return {**kind_module("bound").EXAMPLE, **changes}


# `bound` requests (counts in, no model) whose verdict is each of the four outcomes (app/audit/stats/verdict.py):
# the example claims nothing and shows ε ≥ 0.40 (leak); a claim of 0.05 is below that (violation); 25
# trials per side cannot certify a claim of 2 even when perfectly separated (inconclusive); a Gaussian
# mechanism at exactly ε = 1, its operating point at FPR 0.3 measured over 100,000 trials per side, claiming
# 1 under gdp, is seen and found within it (consistent).
VERDICT_REQUESTS: dict[str, dict[str, Any]] = {
    "violation": {**kind_module("bound").EXAMPLE, "epsilon": 0.05},
    "leak": dict(kind_module("bound").EXAMPLE),
    "inconclusive": {"kind": "bound", "counts": {"tp": 25, "fn": 0, "fp": 0, "tn": 25}, "epsilon": 2},
    "consistent": {
        "kind": "bound",
        "counts": {"tp": 39_884, "fn": 60_116, "fp": 30_000, "tn": 70_000},
        "epsilon": 1,
        "assumption": "gdp",
    },
}


def verdict_request(outcome: str, **changes: Any) -> dict[str, Any]:
    """A cheap real audit (the `bound` kind) whose result's verdict is `outcome`."""
    return {**VERDICT_REQUESTS[outcome], **changes}


def underpowered_mia_request(**until_answer: Any) -> dict[str, Any]:
    """Oracle private voting at 25 trials against ε = 2: `inconclusive`, under-powered, its first next step
    more trials (about a second of work; 1,181 trials answer `consistent`); `until_answer` when given."""
    body: dict[str, Any] = {
        "kind": "mia",
        "dataset": "dbpedia14",
        "model": "oracle",
        "seed": 1,
        "mechanism": {
            "name": "private_voting",
            "partitions": 4,
            "shots_per_partition": 2,
            "calibration": "analytic",
        },
        "epsilon": 2,
        "delta": 1e-5,
        "attack": {"name": "inquiry", "threat_model": "both"},
        "trials": 25,
        "labels": {"pipeline": "nightly"},
    }
    return body | ({"until_answer": until_answer} if until_answer else {})


def long_mia_request(trials: int = 2_000_000, seed: int = 7) -> dict[str, Any]:
    """A real membership audit against the oracle engine that runs for seconds (for cancel and SIGKILL)."""
    return {
        "kind": "mia",
        "dataset": "ag_news",
        "model": "oracle",
        "seed": seed,
        "mechanism": {"name": "private_voting", "partitions": 4, "shots_per_partition": 2},
        "epsilon": 1.0,
        "delta": 1e-5,
        "attack": {"name": "inquiry", "threat_model": "both"},
        "llm_calls": 200,
        "trials": trials,
        "estimator": "bootstrap",
    }


def white_box_request(
    dataset: str,
    canaries: int,
    contexts: int,
    *,
    model: str = "oracle",
    seed: int = 0,
    shots: int = 1,
    attack: str = "likelihood",
    **options: Any,
) -> dict[str, Any]:
    """A white-box membership audit with no mechanism (`attack` of the likelihood family, `options` on
    the attack): the cheap real audit tests and benchmarks run on records."""
    return {
        "kind": "mia",
        "dataset": dataset,
        "model": model,
        "seed": seed,
        "mechanism": {"name": "none", "shots_per_partition": shots},
        "attack": {"name": attack, "threat_model": "white_box", "canaries": canaries, "contexts": contexts}
        | options,
    }


def endpoint_request(
    url: str,
    *,
    dataset: str = "ag_news",
    trials: int = 4,
    epsilon: float | None = 1.0,
    **endpoint: Any,
) -> dict[str, Any]:
    """A black-box membership audit of the HTTP endpoint at `url` (answers at `$.choices[0].text`, no
    retries; `endpoint` adds to or replaces its settings, e.g. `headers`)."""
    body: dict[str, Any] = {
        "kind": "mia",
        "dataset": dataset,
        "seed": 3,
        "epsilon": epsilon,
        "estimator": "direct",
        "trials": trials,
        "mechanism": {
            "name": "http_endpoint",
            "partitions": 4,
            "shots_per_partition": 2,
            "endpoint": {"url": url, "answer_path": "$.choices[0].text", "retries": 0} | endpoint,
        },
        "attack": {"name": "canary_prompt", "threat_model": "black_box"},
    }
    if epsilon is None:
        del body["epsilon"]
    return body


def wait_for(
    get: Any,
    audit_id: str,
    states: tuple[str, ...] = TERMINAL,
    timeout: float = 60.0,
    min_fraction: float = 0.0,
) -> dict[str, Any]:
    """Poll `get(path)` (a TestClient or httpx client's .get) until the audit reaches one of `states`."""
    deadline = time.monotonic() + timeout
    while True:
        audit = get(f"/v1/audits/{audit_id}").json()
        if audit["state"] in states and audit["progress"]["fraction"] >= min_fraction:
            return audit
        if audit["state"] in TERMINAL and audit["state"] not in states:
            raise AssertionError(f"audit ended {audit['state']} while waiting for {states}: {audit['error']}")
        if time.monotonic() > deadline:
            raise AssertionError(f"audit still {audit['state']} after {timeout}s: {audit['progress']}")
        time.sleep(0.05)


def sse_events(client, audit_id: str, **headers: str) -> list[dict[str, Any]]:
    """Every `audit` event of the stream until the server ends it."""
    events, current = [], {}
    with client.stream("GET", f"/v1/audits/{audit_id}/events", headers=headers) as stream:
        assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream")
        for line in stream.iter_lines():
            field, _, value = line.partition(": ")
            if field in ("event", "id", "data"):
                current[field] = value
            elif not line and "data" in current:
                events.append(
                    {**json.loads(current["data"]), "event": current["event"], "etag": current["id"]}
                )
                current = {}
    return events
