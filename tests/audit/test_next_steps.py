"""An inconclusive result is never a dead end (app/audit/stats/next_steps.py): each source of `next_steps` on a
real audit (the oracle, the simulated engine, counts), and each step, taken, gives a smaller ε_detectable or
an answer. Per-record flags: the contexts per record at which one can fire."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.audit.kinds import mia
from app.audit.results.base import ResultBase
from app.audit.results.steps import NextStep
from app.audit.standalone import run_request
from app.audit.stats.verdict import POWER_FACTOR

ROOT = Path(__file__).resolve().parents[2]


def example(name: str, **override: Any) -> dict:
    return json.loads((ROOT / "examples" / name).read_text()) | override


def taken(body: dict, step: dict) -> dict:
    """`body` with the step's `set` applied (dotted paths)."""
    out = json.loads(json.dumps(body))
    for path, value in step["set"].items():
        *parents, leaf = path.split(".")
        node = out
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return out


def test_too_few_trials_name_the_trials_that_answer_and_taking_them_answers() -> None:
    body = example("mia-oracle-eps1.json", trials=25, epsilon=2)
    first = run_request(body)
    assert first["verdict"] == "inconclusive"
    (step,) = first["next_steps"]
    NextStep.model_validate(step)  # the schema the OpenAPI declares
    assert step["why"].startswith("under-powered") and set(step["set"]) == {"trials"}
    trials = step["set"]["trials"]
    assert trials > 25 and step["epsilon_detectable"] <= POWER_FACTOR * 2
    assert step["seconds"] is None  # the oracle's run is mostly fixed cost: its seconds do not scale
    assert f"set trials = {trials:,} (now 25)" in step["text"]

    second = run_request(taken(body, step))
    assert second["verdict"] == "consistent" and "next_steps" not in second
    # η from the mechanism's design: the rerun's power is the one the step promised
    assert second["epsilon_detectable"] == pytest.approx(step["epsilon_detectable"], rel=1e-6)
    # and 5 % fewer trials would not have answered (the step is the smallest, to 5 %)
    fewer = run_request(body | {"trials": int(trials / 1.06)})
    assert fewer["verdict"] == "inconclusive" and fewer["epsilon_detectable"] > POWER_FACTOR * 2


def test_a_model_that_ignores_the_canary_says_what_was_measured_and_what_to_change() -> None:
    """The simulated engine with no shift and 0.1 % valid votes: P(y+) ≈ 0 with and without the canary."""
    body = example(
        "mia-oracle-eps1.json",
        model="simulated:shift=0,valid=0.001,seed=3",
        trials=20_000,
        llm_calls=50,
        epsilon=2,
    )
    result = run_request(body)
    assert result["verdict"] == "inconclusive" and result["epsilon_detectable_unbounded"] is True
    steps = result["next_steps"]
    assert [s["set"] for s in steps] == [{"mechanism.teacher_output": "label_logprobs"}, {"model": "oracle"}]
    signal = result["signal"]
    said = f"P({signal['answer']}) {signal['p_with']:.2f} with and {signal['p_without']:.2f} without"
    assert all("the model does not react to this canary" in s["text"] and said in s["text"] for s in steps)
    # teachers already read by their label's log-probabilities: only the oracle is left to suggest
    read = run_request(taken(body, steps[0]))
    assert read["verdict"] == "inconclusive" and [s["set"] for s in read["next_steps"]] == [
        {"model": "oracle"}
    ]
    # the noise itself, on the oracle: the same audit now sees a signal, its power finite
    oracle = run_request(taken(body, steps[1]))
    assert oracle["epsilon_detectable"] is not None and oracle["verdict"] in ("consistent", "inconclusive")


def test_scores_that_do_not_separate_say_so_and_no_trials_are_proposed() -> None:
    scores = [float(i % 10) for i in range(400)]
    result = run_request({"kind": "bound", "scores_in": scores, "scores_out": scores, "epsilon": 1})
    assert result["verdict"] == "inconclusive"
    (step,) = result["next_steps"]
    assert step["why"] == "no usable signal" and step["set"] is None
    assert "AUC 0.500" in step["text"] and "no number of trials helps" in step["text"]


def test_a_bound_from_few_counts_names_the_trials_per_side() -> None:
    counts = {"tp": 25, "fn": 0, "fp": 0, "tn": 25}  # 25 per side can certify too little for a claim of 2
    result = run_request({"kind": "bound", "counts": counts, "epsilon": 2})
    assert result["verdict"] == "inconclusive"
    (step,) = result["next_steps"]
    assert step["set"] is None and "collect trials per side = " in step["text"]
    assert step["epsilon_detectable"] <= POWER_FACTOR * 2
    # the same rates at the proposed trials per side answer
    n = int(step["text"].split("trials per side = ")[1].split()[0].replace(",", ""))
    scaled = {k: round(v * n / 25) for k, v in counts.items()}
    again = run_request({"kind": "bound", "counts": scaled, "epsilon": 2})
    assert again["verdict"] in ("consistent", "violation") and "next_steps" not in again


def test_per_record_flags_that_cannot_fire_name_the_contexts_that_let_them() -> None:
    """20 records at 95 %: a flag needs p ≤ 0.0025, and 2⁻⁴ = 0.0625; 9 contexts give 2⁻⁹ ≈ 0.002."""
    body = example("likelihood-oracle-records.json")
    body["attack"] = body["attack"] | {"contexts": 4}
    few = run_request(body)
    assert few["verdict"] == "leak" and not any(r["flagged"] for r in few["records"])
    (step,) = few["next_steps"]  # beside a leak: the only step is the per-record one
    assert step["set"] == {"attack.contexts": 9} and step["why"] == "per-record flags cannot fire"
    assert "smallest p is 0.0625, above 0.0025" in step["text"]
    enough = run_request(taken(body, step))
    assert enough["verdict"] == "leak" and "next_steps" not in enough
    assert any(r["flagged"] for r in enough["records"])


def test_the_result_schema_declares_next_steps() -> None:
    assert "next_steps" in ResultBase.model_fields
    schema = mia.Request.model_json_schema()  # the request is unchanged: the result carries the steps
    assert "next_steps" not in schema["properties"]


def test_the_report_shows_the_next_step_under_the_headline() -> None:
    from app.reports import html as report

    request = example("mia-oracle-eps1.json", trials=25, epsilon=2)
    result = run_request(request)
    text = result["next_steps"][0]["text"]
    page = report.render({"id": "a" * 32, "kind": "mia", "request": request, "result": result})
    shown = page.split('id="report-next-steps"')[1].split("</ul>")[0]
    assert f"<li>Next: {html.escape(text)}</li>" in shown


def test_a_weak_score_says_what_efficiency_the_attack_would_need() -> None:
    """Scores shifted by 0.06 σ (AUC 0.517 on 400 a side): η's lower bound is 0, its point estimate 0.22;
    at claim 1, consistent needs η·μ(1.5) > μ(1), η ≥ 0.70, so no number of trials answers: the step
    says so, with the efficiency an attack would need."""
    rng = np.random.default_rng(5005)
    scores_in, scores_out = rng.normal(0.06, 1, 400).tolist(), rng.normal(0, 1, 400).tolist()
    result = run_request({"kind": "bound", "scores_in": scores_in, "scores_out": scores_out, "epsilon": 1})
    assert result["verdict"] == "inconclusive" and result["epsilon_detectable_unbounded"] is True
    (step,) = result["next_steps"]
    assert step["why"] == "weak signal" and step["set"] is None
    assert "at its point estimate η = 0.22" in step["text"]
    assert "an attack seeing η ≥ 0.70 of the signal" in step["text"]
