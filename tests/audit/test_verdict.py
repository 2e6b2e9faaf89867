"""The four-outcome verdict (app/audit/stats/verdict.py) and its power, on real audits (oracle, SmolLM2) and by
seeded simulation (seeds ≥ 5000). The full-size checks are docs/results/verdict_power.py's."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from app.audit.accounting.gdp import mu_for_epsilon
from app.audit.kinds import bound as bound_kind
from app.audit.runtime import RunContext
from app.audit.standalone import run_request
from app.audit.stats.verdict import (
    POWER_FACTOR,
    MembershipTest,
    certifiable_max,
    detection_rate,
    judge,
    membership_test,
)

ROOT = Path(__file__).resolve().parents[2]


def example(name: str, **override) -> dict:
    return json.loads((ROOT / "examples" / name).read_text()) | override


def test_plain_icl_that_leaks_every_record_is_a_leak_not_a_pass() -> None:
    r = run_request(example("likelihood-oracle-records.json"))
    assert r["verdict"] == "leak" and r["violation"] is False
    assert (
        r["headline"].startswith("Plain ICL leaks: ε ≥ 3.28 (95 %)") and "nothing is claimed" in r["headline"]
    )
    # Allowing ε = 5: these 100 trials per side can certify at most 3.28, so they cannot tell a system
    # within 5 from one leaking everything (which this one does): inconclusive, never a pass.
    allowed = run_request(example("likelihood-oracle-records.json", max_epsilon=5))
    assert allowed["verdict"] == "inconclusive" and allowed["epsilon_detectable_unbounded"] is True
    assert "100 trials per side can certify at most ε = 3.28" in allowed["verdict_reason"]
    # With the trials to resolve it, the same leak is seen above 5.
    more = run_request(example("likelihood-oracle-records.json", max_epsilon=3, attack={
        "name": "likelihood", "threat_model": "white_box", "canaries": 20, "contexts": 30}))  # fmt: skip
    assert more["verdict"] == "leak" and "above the allowed 3" in more["headline"]


def test_too_few_trials_for_the_claim_is_inconclusive_and_names_the_trials() -> None:
    r = run_request(example("mia-oracle-eps1.json", trials=25, epsilon=2))
    assert r["verdict"] == "inconclusive" and r["violation"] is False
    assert "with 25 trials per side" in r["verdict_reason"]
    assert r["epsilon_detectable"] > POWER_FACTOR * 2
    assert r["headline"].startswith("Inconclusive:") and "(claimed 2)" in r["headline"]


def test_oracle_at_its_claim_with_its_trials_is_consistent_and_a_planted_bug_a_violation() -> None:
    ok = run_request(example("mia-oracle-eps1.json", seed=5000))
    assert ok["verdict"] == "consistent" and 1.0 < ok["epsilon_detectable"] <= POWER_FACTOR
    assert ok["power"]["efficiency_source"] == "design" and ok["power"]["efficiency"] == pytest.approx(1.0)
    assert ok["headline"].startswith("Consistent with the claimed ε = 1")
    bug = run_request(example("mia-oracle-bug-noise-divided-by-t.json", seed=5000))
    assert bug["verdict"] == "violation" and bug["violation"] is True
    assert bug["headline"].endswith("against a claimed 1: violation")


@pytest.mark.parametrize("epsilon", [4.0, 8.0])
def test_an_in_sample_threshold_never_gives_a_verdict_at_the_stated_confidence(epsilon: float) -> None:
    """The review's 35/400 (ε = 4) and 68/400 (ε = 8) false violations came from thresholds chosen on
    the trials their bound uses; every such audit is now inconclusive and says why."""
    for seed in range(5000, 5010):
        r = run_request(
            example(
                "mia-oracle-eps1.json",
                seed=seed,
                epsilon=epsilon,
                trials=2000,
                threshold_strategy="in_sample",
            )
        )
        assert r["verdict"] == "inconclusive" and r["violation"] is False
        assert "in-sample" in r["verdict_reason"]
        assert r["white_box"]["biased"] is True and r["white_box"]["violation"] is False


def test_likelihood_in_sample_is_inconclusive_too() -> None:
    r = run_request(example("likelihood-oracle-records.json", threshold_strategy="in_sample"))
    assert r["verdict"] == "inconclusive" and r["white_box"]["biased"] is True


@pytest.mark.slow  # the real SmolLM2
def test_a_signal_free_attack_on_smollm2_is_inconclusive() -> None:
    """SmolLM2 asked the inquiry by free-text teachers sampling at temperature 1 (private voting at ε = 4; the
    quickstart's audit before its teachers voted greedily by their labels' log-probabilities), with fewer
    calls: AUC ≈ 0.5."""
    demo = example("mia-demo-synthetic-records.json", llm_calls=20, trials=20000)
    mechanism = {
        "name": "private_voting",
        "partitions": 4,
        "shots_per_partition": 1,
        "calibration": "analytic",
    }
    r = run_request(demo | {"mechanism": mechanism, "attack": {"name": "inquiry", "threat_model": "both"}})
    assert r["verdict"] == "inconclusive" and r["epsilon_detectable_unbounded"] is True
    assert "no usable signal" in r["verdict_reason"] and "AUC 0.5" in r["verdict_reason"]


@pytest.mark.slow  # loads SmolLM2 through the quickstart request
def test_the_quickstart_answers_on_smollm2() -> None:
    """The README's DP audit (examples/mia-demo-synthetic-records.json) as it is: a real answer on the packaged
    model, not `inconclusive`: with greedy label log-probability teachers the canary flips its partition's vote
    (effect 1), and the correctly calibrated mechanism is `consistent` with the power to see 1.5 × its claim."""
    r = run_request(example("mia-demo-synthetic-records.json"))
    assert r["signal"]["effect"] == 1.0
    assert r["verdict"] == "consistent", r["verdict_reason"]
    assert r["epsilon_detectable"] <= 1.5 * r["epsilon_theory"]


def _test(n: int | None, efficiency: float = 1.0, assumption: str = "gdp", **kw) -> MembershipTest:
    return MembershipTest("t", n, n, 0.95, 1e-5, assumption, efficiency, kw.pop("lower", 0.0), **kw)  # type: ignore[arg-type]


def test_judge_orders_the_reasons() -> None:
    common = {"max_epsilon": 0.0, "confidence": 0.95}
    biased = judge([_test(1000, lower=9.0, biased=True)], claimed=1.0, **common)
    assert biased.verdict == "inconclusive" and "in-sample" in biased.reason
    blocked = judge([_test(1000, lower=9.0)], claimed=1.0, blocked="no partition held the canary", **common)
    assert blocked.verdict == "inconclusive"
    assert judge([_test(1000, lower=1.5)], claimed=1.0, **common).verdict == "violation"
    assert judge([_test(1000, lower=0.1)], claimed=None, **common).verdict == "leak"
    blind = judge([_test(1000, efficiency=0.0)], claimed=None, **common)
    assert blind.verdict == "inconclusive" and "no usable signal" in blind.reason
    nothing = judge([_test(1000)], claimed=None, **common)  # max_epsilon 0 and no leak shown
    assert nothing.verdict == "inconclusive" and "no finite audit" in nothing.reason
    assert judge([_test(10**6)], claimed=1.0, **common).verdict == "consistent"
    weak = judge([_test(10**6, efficiency=0.001)], claimed=1.0, **common)
    assert weak.verdict == "inconclusive" and "no usable signal" in weak.reason
    exact = judge([_test(None, lower=0.999)], claimed=1.0, **common)  # population rates: full power
    assert exact.verdict == "consistent" and 1.0 < exact.epsilon_detectable < 1.01


def test_detection_rate_is_monotone_and_trials_cap_what_can_be_certified() -> None:
    t = _test(2000)
    rates = [detection_rate(t, eps, 1.0) for eps in (1.0, 1.5, 2.0, 3.0, 5.0)]
    assert rates == sorted(rates) and rates[0] < 0.05 and rates[-1] > 0.95
    # The assumption-free bound of 12 held-out trials per side (a 25-trial split) never passes ≈ 1
    assert certifiable_max(_test(12, assumption="none")) < 1.1
    assert math.isinf(certifiable_max(_test(None)))


def test_epsilon_detectable_predicts_the_flag_rate_of_gaussian_mechanisms() -> None:
    """The docs' third setting, small: scores N(μ(ε'), 1) against N(0, 1) through the `bound` kind (gdp,
    split, 1,000 per side, claim 1). Audits at the claim predict how often ε' = k × claim is flagged;
    audits at k × claim measure it (other seeds). 40 audits per cell. With the design's efficiency (η = 1:
    the scores are the mechanism's own) the model is within 20 points (the docs' run, 200 per cell, holds
    10); with the measured η (a lower confidence bound) it never promises more than it delivers."""
    claim, n = 1.0, 40

    def audit(seed: int, eps: float) -> dict:
        rng = np.random.default_rng([seed, 77])
        body = {
            "kind": "bound",
            "seed": seed,
            "scores_in": (rng.normal(size=1000) + mu_for_epsilon(eps, 1e-5)).tolist(),
            "scores_out": rng.normal(size=1000).tolist(),
            "assumption": "gdp",
            "epsilon": claim,
        }
        return bound_kind.run(bound_kind.Request.model_validate(body), RunContext()).stored()

    at_claim = [(seed, audit(seed, claim)) for seed in range(5000, 5000 + n)]
    for k in (1.0, 2.0, 3.0):
        tests = [
            membership_test("bound", r, delta=1e-5, confidence=0.95, threshold=claim) for _, r in at_claim
        ]

        def predict(efficiency: float | None, k: float = k, tests: list = tests) -> float:
            return float(np.mean([
                detection_rate(
                    t if efficiency is None else dataclasses.replace(t, efficiency=efficiency),
                    k * claim,
                    claim,
                )
                for t in tests
            ]))  # fmt: skip

        measured = np.mean(
            [audit(seed, k * claim)["epsilon_lower"] > claim for seed in range(6000, 6000 + n)]
        )
        assert abs(predict(1.0) - measured) <= 0.20, (k, predict(1.0), measured)
        assert predict(None) <= measured + 0.10, (k, predict(None), measured)
