"""A `consistent` that a leaking system cannot earn (app/audit/stats/verdict.py): power from what the attack
can do, not from the leak under test. Small seeded simulations (seeds ≥ 5000) of systems whose true ε is
known; the full-size table is docs/results/verdict_power.py's ("What a pass is worth")."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError

from app.audit.accounting.gdp import mu_for_epsilon
from app.audit.kinds import bound as bound_kind
from app.audit.kinds import mia
from app.audit.mechanisms.base import calibrate
from app.audit.mechanisms.bugs import factor_for_multiple
from app.audit.runtime import RunContext
from app.audit.standalone import run_request
from app.audit.stats.thresholds import bonferroni_tests
from app.audit.stats.verdict import (
    DETECT_PROBABILITY,
    POWER_FACTOR,
    MembershipTest,
    detection_rate,
    epsilon_detectable,
    gaussian_shaped,
    leak_rate_detectable,
    membership_test,
)


def _bound(body: dict) -> dict:
    return bound_kind.run(bound_kind.Request.model_validate({"kind": "bound"} | body), RunContext()).stored()


def _gaussian(seed: int, epsilon_true: float, n: int, **kw) -> dict:
    """`bound` on scores of a Gaussian mechanism whose true ε is `epsilon_true` (a perfect score attack)."""
    rng = np.random.default_rng([seed, 29])
    scores_in = rng.normal(size=n) + mu_for_epsilon(epsilon_true, 1e-5)
    body = {"seed": seed, "scores_in": scores_in.tolist(), "scores_out": rng.normal(size=n).tolist()}
    return _bound(body | {"epsilon": 1.0} | kw)


def test_the_reviews_counts_requests_are_not_consistent() -> None:
    # exactly a (3, 1e-5) Gaussian mechanism at FPR 0.1, claimed ε = 1: was exit 0, "consistent"
    violator = _bound({"seed": 7001, "counts": {"tp": 287, "fn": 713, "fp": 100, "tn": 900}, "epsilon": 1})
    assert violator["verdict"] != "consistent"
    # the canary repeated in 0.5 % of answers when present, never otherwise (no ε guarantees it): was exit 0
    rare = _bound({"seed": 7001, "counts": {"tp": 5, "fn": 995, "fp": 0, "tn": 1000}, "epsilon": 1})
    assert rare["verdict"] == "inconclusive"
    assert rare["power"]["leak_rate_detectable"] > 0.005  # and it says that a 0.5 % leak is below its reach
    # the honest ε = 1 mechanism at the same FPR: inconclusive, never a violation
    honest = _bound({"seed": 7001, "counts": {"tp": 156, "fn": 844, "fp": 100, "tn": 900}, "epsilon": 1})
    assert honest["verdict"] == "inconclusive"


def test_an_honest_gaussian_at_10000_per_side_is_consistent_and_says_what_it_could_see() -> None:
    r = _gaussian(5001, 1.0, 10_000, assumption="gdp")
    assert r["verdict"] == "consistent", r["headline"]
    power = r["power"]
    assert 1.0 < r["epsilon_detectable"] <= POWER_FACTOR
    assert power["efficiency_source"] == "measured" and 0 < power["efficiency"] <= 1
    assert power["detect_probability"] == DETECT_PROBABILITY and power["factor"] == POWER_FACTOR
    assert set(power["detection"]) == {"1.25", "1.5", "2"} and power["detection"]["1.5"] >= DETECT_PROBABILITY
    assert power["detection"]["1.25"] <= power["detection"]["1.5"] <= power["detection"]["2"]
    rate = power["leak_rate_detectable"]
    assert 0 < rate < 0.01 and f"or a leak in ≥ {100 * rate:.2g} % of answers" in r["headline"]
    assert "Gaussian-shaped" in r["headline"] and "Gaussian-shaped ROC" in power["assumption"]


@pytest.mark.parametrize(("k", "most"), [(1.5, 2), (2.0, 0)])
def test_a_system_leaking_k_times_its_claim_is_rarely_consistent(k: float, most: int) -> None:
    """Was: 2× violators 21/40 consistent at 1,000 per side and 40/40 at 5,000. Now, 10 audits a cell at
    1,000 and 5,000 per side (split, both assumptions): consistent in ≤ 20 % at 1.5× and none at 2×."""
    for n in (1000, 5000):
        for assumption in ("gdp", "none"):
            verdicts = [_gaussian(seed, k, n, assumption=assumption)["verdict"] for seed in range(5000, 5010)]
            assert verdicts.count("consistent") <= most, (n, assumption, verdicts)


def test_power_never_credits_more_than_a_perfect_attack() -> None:
    """η is a lower confidence bound capped at 1: the stronger the leak under test, the more η reaches 1,
    never beyond — so ε_detectable is the same for a system at 3× and at 10× its claim."""
    etas = [_gaussian(5003, k, 2000, assumption="gdp").get("power") for k in (1.0, 1.2)]
    assert all(p is not None and 0 <= p["efficiency"] <= 1 for p in etas)
    fields = {"tpr": 0.9, "fpr": 0.01, "counts": {"tp": 900, "fn": 100, "fp": 10, "tn": 990}}
    test = membership_test("t", fields | {"threshold_strategy": "decision"}, delta=1e-5, confidence=0.95,
                           threshold=1.0)  # fmt: skip
    assert test.efficiency == 1.0 and test.efficiency_source == "measured"


def test_epsilon_detectable_is_above_the_threshold_at_every_valid_confidence() -> None:
    """The invariant: a test valid at confidence γ ≥ ½ flags a system exactly at the threshold with
    probability ≤ ½ < DETECT_PROBABILITY, so no audit may print ε_detectable ≤ the threshold."""
    rng = np.random.default_rng(5029)
    for _ in range(60):
        n = int(rng.choice([25, 100, 1000, 10_000, 10**6]))
        test = MembershipTest(
            name="t",
            n_in=n,
            n_out=n,
            confidence=float(rng.uniform(0.5, 0.999)),
            delta=1e-5,
            assumption=str(rng.choice(["gdp", "none"])),  # type: ignore[arg-type]
            efficiency=float(rng.uniform(0.05, 1.0)),
            epsilon_lower=0.0,
            selection_penalty=float(rng.choice([1.0, 100.0])),
            tests=int(rng.choice([1, 50])),
        )
        threshold = float(rng.choice([0.25, 1.0, 4.0, 8.0]))
        assert epsilon_detectable(test, threshold) > threshold
        assert detection_rate(test, threshold, threshold) <= 1 - test.confidence + 0.03


@pytest.mark.parametrize("kind", ["bound", "mia"])
def test_every_kind_prints_a_power_above_its_threshold(kind: str) -> None:
    if kind == "bound":
        r = _gaussian(5004, 1.0, 4000, assumption="gdp", confidence=0.5)
    else:
        r = run_request(
            {
                "kind": "mia",
                "dataset": "dbpedia14",
                "model": "oracle",
                "seed": 5004,
                "mechanism": {"name": "private_voting", "partitions": 4, "calibration": "analytic"},
                "epsilon": 1,
                "confidence": 0.5,
                "attack": {"name": "inquiry", "threat_model": "both"},
                "trials": 4000,
            }
        )
    assert r["verdict"] != "violation" or r["epsilon_detectable"] is None
    if r["epsilon_detectable"] is not None:
        assert r["epsilon_detectable"] > 1.0


def test_bonferroni_is_modelled_at_alpha_over_its_candidates() -> None:
    r = _gaussian(5005, 1.0, 2000, assumption="gdp", threshold_strategy="bonferroni")
    test = membership_test("t", r, delta=1e-5, confidence=0.95, threshold=1.0)
    assert test.tests == bonferroni_tests(2000) > 50
    unsplit = MembershipTest(**{**test.__dict__, "tests": 1})
    assert detection_rate(test, 1.5, 1.0) < detection_rate(unsplit, 1.5, 1.0)


def test_leak_rate_detectable_is_the_smallest_one_sided_leak_flagged_with_probability_08() -> None:
    test = MembershipTest("t", 1000, 1000, 0.95, 1e-5, "none", 1.0, 0.0)
    rate = leak_rate_detectable(test, 1.0)
    assert rate is not None and 0.005 < rate < 0.05
    # simulate the one-sided leak: TP ~ Bin(1000, p), FP = 0, judged by the assumption-free bound
    rng = np.random.default_rng(5006)
    from app.audit.stats.bounds import Counts, gdp_bound_from_counts

    def flag_rate(p: float) -> float:
        tps = rng.binomial(1000, p, size=400)
        return float(np.mean([
            gdp_bound_from_counts(Counts(tp=int(t), fn=1000 - int(t), fp=0, tn=1000), assumption="none")
            .epsilon_lower > 1.0
            for t in tps
        ]))  # fmt: skip

    assert flag_rate(rate) >= DETECT_PROBABILITY - 0.05
    assert flag_rate(rate * 0.6) < DETECT_PROBABILITY
    assert leak_rate_detectable(MembershipTest("t", None, None, 0.95, 1e-5, "none", 1.0, 0.0), 1.0) is None


def test_confidence_below_one_half_is_refused_naming_the_field() -> None:
    for model, body in (
        (bound_kind.Request, {"kind": "bound", "counts": {"tp": 1, "fn": 1, "fp": 1, "tn": 1}, "epsilon": 1}),
        (mia.Request, {"kind": "mia", "dataset": "ag_news", "model": "oracle", "epsilon": 1,
                       "mechanism": {"name": "private_voting"}, "attack": {"name": "inquiry"}}),
    ):  # fmt: skip
        with pytest.raises(ValidationError) as err:
            model.model_validate(body | {"confidence": 1e-6})
        assert any(e["loc"][-1] == "confidence" for e in err.value.errors())
        model.model_validate(body | {"confidence": 0.5})


def test_noise_scale_makes_a_system_k_times_its_claim_for_voting_esa_and_ksa() -> None:
    theory = calibrate(1.0, 1e-5, math.sqrt(2), "analytic")
    factor = factor_for_multiple(theory, 3.0)
    assert mu_for_epsilon(3.0, 1e-5) == pytest.approx(theory.mu / factor)
    body = {
        "kind": "mia",
        "dataset": "dbpedia14",
        "model": "oracle",
        "seed": 5007,
        "mechanism": {"name": "private_voting", "partitions": 4, "calibration": "analytic",
                      "bug": "noise_scale", "bug_factor": factor},
        "epsilon": 1,
        "attack": {"name": "inquiry", "threat_model": "both"},
        "trials": 4000,
    }  # fmt: skip
    r = run_request(body)
    assert r["verdict"] == "violation", r["headline"]
    for name in ("esa", "ksa"):
        spec = {"name": name, "bug": "noise_scale", "bug_factor": 0.5}
        mia.MechanismSpec.model_validate(spec)
    # a factor without its bug changes nothing (the schema states no rule between the two)
    plain = mia.Request.model_validate(body | {"mechanism": {"name": "private_voting", "bug_factor": 0.5}})
    assert plain.mechanism.bug is None


def test_mass_at_fpr_zero_is_not_gaussian_shaped_and_never_consistent() -> None:
    """An honest Gaussian mechanism that also repeats the canary in 2 % of its answers when present: the
    top of its ROC holds more C1 scores above every C0 score than any Gaussian ROC with its AUC allows."""
    rng = np.random.default_rng([5008, 29])
    n = 10_000
    scores_in = rng.normal(size=n) + mu_for_epsilon(1.0, 1e-5)
    scores_in[rng.random(n) < 0.02] = 50.0
    body = {"seed": 5008, "scores_in": scores_in.tolist(), "scores_out": rng.normal(size=n).tolist()}
    r = _bound(body | {"epsilon": 1.0, "assumption": "gdp"})
    assert r["verdict"] != "consistent"
    fields = {"auc": r["auc"], "above_every_out": r["above_every_out"]}
    assert not gaussian_shaped(fields, n, n)
    honest = _gaussian(5008, 1.0, n, assumption="gdp")
    assert gaussian_shaped(honest, n, n)
