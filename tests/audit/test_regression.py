"""The regression gate's statistics (app/audit/regression.py): the upper confidence bound on a test's ε
covers at its confidence, brackets the lower bound, and the comparison flags a stronger leak but not the
same one."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.audit.accounting.gdp import epsilon_for_mu
from app.audit.regression import RegressionError, compare
from app.audit.stats.bounds import (
    Counts,
    assumption_free_epsilon,
    epsilon_upper_from_counts,
    gdp_bound_from_counts,
    mu_from_rates,
)


def _bound_result(tp: int, fn: int, fp: int, tn: int) -> dict:
    """A stored `bound` result, as the kind writes it (the bound's dict and the verdict's fields)."""
    bound = gdp_bound_from_counts(Counts(tp, fn, fp, tn), assumption="none").as_dict()
    bound["counts"] = {"tp": tp, "fn": fn, "fp": fp, "tn": tn}
    return {"kind": "bound", **bound}


def test_the_upper_bound_brackets_the_observed_test_with_the_lower_one() -> None:
    counts = Counts(2400, 1600, 1500, 2500)
    for assumption in ("gdp", "none"):
        low = gdp_bound_from_counts(counts, assumption=assumption).epsilon_lower
        high = epsilon_upper_from_counts(counts, assumption=assumption)
        rates = (np.array([0.4]), np.array([0.375]))  # the observed FNR and FPR
        seen = (
            float(assumption_free_epsilon(*rates, 1e-5)[0])
            if assumption == "none"
            else epsilon_for_mu(float(mu_from_rates(*rates)[0]), 1e-5)
        )
        assert low < seen < high, (assumption, low, seen, high)
    more = Counts(24000, 16000, 15000, 25000)  # ten times the trials: a tighter bound
    assert epsilon_upper_from_counts(more, assumption="none") < epsilon_upper_from_counts(
        counts, assumption="none"
    )
    assert math.isinf(epsilon_upper_from_counts(Counts(10, 0, 0, 10)))  # no error seen: nothing bounds it


def test_the_upper_bound_covers_the_true_epsilon_at_its_confidence() -> None:
    """2,000 simulated tests of true FNR 0.4 and FPR 0.3 (500 trials a side): the 90 % upper bound falls
    below the ε of the true rates in at most 10 % of them (Clopper-Pearson is conservative)."""
    rng = np.random.default_rng(0)
    true = float(assumption_free_epsilon(np.array([0.4]), np.array([0.3]), 1e-5)[0])
    n, runs = 500, 2000
    misses = 0
    for fn, fp in zip(rng.binomial(n, 0.4, runs), rng.binomial(n, 0.3, runs), strict=True):
        upper = epsilon_upper_from_counts(
            Counts(n - int(fn), int(fn), int(fp), n - int(fp)), confidence=0.9, assumption="none"
        )
        misses += upper < true
    assert misses / runs <= 0.10, misses / runs


def test_the_same_leak_does_not_regress_and_a_stronger_one_does() -> None:
    baseline = _bound_result(2400, 1600, 1500, 2500)
    same = compare(_bound_result(2400, 1600, 1500, 2500), baseline)
    assert not same["regressed"] and same["headline"].startswith("No regression: measured ε ≥ 0.404")
    worse = compare(_bound_result(3000, 1000, 1500, 2500), baseline)
    (test,) = worse["tests"]
    assert worse["regressed"] and test["epsilon_lower"] > test["baseline_epsilon_upper"]
    assert test["name"] == "bound" and test["assumption"] == "none" and test["baseline_confidence"] == 0.95
    assert worse["headline"].startswith("Regression: measured ε ≥ ") and "(95 %)" in worse["headline"]


def test_mia_compares_each_threat_model_it_shares_with_the_baseline() -> None:
    def mia(tp: int) -> dict:
        side = {**_bound_result(tp, 4000 - tp, 1500, 2500), "confidence": 0.975}
        return {"kind": "mia", "black_box": side, "white_box": _bound_result(2400, 1600, 1500, 2500)}

    found = compare(mia(3200), mia(2400))
    assert [t["name"] for t in found["tests"]] == ["black_box", "white_box"]
    assert [t["regressed"] for t in found["tests"]] == [True, False] and found["regressed"]
    assert "(black_box)" in found["headline"] and found["tests"][0]["baseline_confidence"] == 0.975


def test_results_without_a_membership_test_cannot_be_compared() -> None:
    with pytest.raises(RegressionError, match="share no membership test"):
        compare({"kind": "synthetic_generation", "epsilon_empirical": 1.0}, _bound_result(1, 1, 1, 1))
