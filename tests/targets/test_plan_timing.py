"""The plan's expected time against the run it plans, on the packaged model: a comparison of two timings of
this test's own audits, so `make test` runs it alone after the parallel tests (Makefile: SERIAL_TESTS),
where no sibling worker slows one side of it only."""

from __future__ import annotations

import json

from targets.test_plan import EXAMPLES, run, seconds


def test_after_a_cold_audit_the_plan_is_within_2x_of_the_warm_run(app_client, make_key) -> None:
    """The packaged model, in a fresh worker (no preload): the first audit waits for the model to load,
    which is recorded apart from its calls; the next plan's rates leave it out (it is reported as its own
    term), so its expected seconds are within 2x of the next run, in the now warm worker. Counted as calls,
    the load had made the plan 4-5x too slow."""
    body = json.loads((EXAMPLES / "mia-demo-synthetic-records.json").read_text()) | {"llm_calls": 30}
    with app_client() as client:
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        cold = run(client, body, timeout=900)
        plan = client.post("/v1/audits/plan", json=body | {"seed": 1})
        assert plan.status_code == 200, plan.text
        warm = run(client, body | {"seed": 1}, timeout=900)
    t = plan.json()["time"]
    assert 0 < t["model_load_seconds"] < seconds(cold), (t, seconds(cold))
    assert t["expected_seconds"] is not None and t["model_seconds_per_call"] > 0
    ratio = t["expected_seconds"] / seconds(warm)
    assert 0.5 <= ratio <= 2.0, (t, seconds(cold), seconds(warm))
