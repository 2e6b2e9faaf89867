"""Clopper-Pearson, the GDP lower bound from counts (003 §2), point estimate, accuracy."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from app.audit.accounting.gdp import epsilon_for_mu
from app.audit.stats.bounds import (
    Counts,
    auditor_accuracy,
    clopper_pearson_lower,
    clopper_pearson_upper,
    gdp_bound_from_counts,
)

counts_strategy = st.builds(
    Counts, tp=st.integers(0, 500), fn=st.integers(0, 500), fp=st.integers(0, 500), tn=st.integers(0, 500)
).filter(lambda c: c.n_in > 0 and c.n_out > 0)


def test_clopper_pearson_matches_scipy_exact_interval() -> None:
    for k, n in [(0, 10), (3, 10), (10, 10), (57, 400), (1, 400_000)]:
        ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.90, method="exact")
        # binomtest finds its interval by root search (≈1e-8 relative); the Beta quantile is exact.
        assert clopper_pearson_lower(k, n, 0.05) == pytest.approx(ci.low, rel=1e-6, abs=1e-15)
        assert clopper_pearson_upper(k, n, 0.05) == pytest.approx(ci.high, rel=1e-6)
    assert clopper_pearson_lower(1, 400_000, 0.05) == pytest.approx(
        -math.expm1(math.log(0.95) / 400_000), rel=1e-12
    )
    assert clopper_pearson_upper(0, 100, 0.05) == pytest.approx(1 - 0.05 ** (1 / 100))
    assert clopper_pearson_lower(100, 100, 0.05) == pytest.approx(0.05 ** (1 / 100))
    with pytest.raises(ValueError):
        clopper_pearson_upper(11, 10, 0.05)


def test_gdp_bound_by_hand() -> None:
    c = Counts(tp=900, fn=100, fp=100, tn=900)
    b = gdp_bound_from_counts(c, confidence=0.95, delta=1e-5)
    fnr_ub = stats.beta.ppf(0.975, 101, 900)
    fpr_ub = stats.beta.ppf(0.975, 101, 900)
    mu = stats.norm.ppf(1 - fnr_ub) - stats.norm.ppf(fpr_ub)
    assert b.mu_lower == pytest.approx(mu, rel=1e-9)
    assert b.epsilon_empirical == pytest.approx(epsilon_for_mu(mu, 1e-5))
    assert b.epsilon_point == pytest.approx(math.log(9))
    assert (b.tpr, b.fpr, b.accuracy, b.n_in, b.n_out) == (0.9, 0.1, 0.9, 1000, 1000)
    assert b.mu_lower < stats.norm.ppf(0.9) - stats.norm.ppf(0.1)  # the bound sits below the point value


def test_anticorrelated_test_gives_zero_not_abs() -> None:
    b = gdp_bound_from_counts(Counts(tp=100, fn=900, fp=900, tn=100))
    assert b.mu_lower == 0.0
    assert b.epsilon_empirical == 0.0
    assert b.epsilon_point == 0.0


def test_zero_fpr_is_unbounded_point_estimate_and_json_ready() -> None:
    b = gdp_bound_from_counts(Counts(tp=50, fn=50, fp=0, tn=100))
    assert b.epsilon_point is None
    d = b.as_dict()
    assert d["epsilon_point"] is None and d["epsilon_point_unbounded"] is True
    assert d["biased"] is False and d["counts"] == {"tp": 50, "fn": 50, "fp": 0, "tn": 100}
    json.dumps(d)
    assert math.isfinite(b.mu_lower) and b.mu_lower > 0


def test_invalid_counts_are_rejected() -> None:
    with pytest.raises(ValueError, match="tp"):
        Counts(tp=-1, fn=0, fp=0, tn=1)
    with pytest.raises(ValueError, match="C1"):
        gdp_bound_from_counts(Counts(tp=0, fn=0, fp=1, tn=1))
    with pytest.raises(ValueError, match="confidence"):
        gdp_bound_from_counts(Counts(1, 1, 1, 1), confidence=1.0)


@given(c=counts_strategy, extra=st.integers(1, 50))
def test_mu_lower_is_monotone_and_never_negative(c: Counts, extra: int) -> None:
    base = gdp_bound_from_counts(c).mu_lower
    assert base >= 0
    if c.fn >= extra:  # more true positives (same n_in) can only raise the bound
        assert gdp_bound_from_counts(Counts(c.tp + extra, c.fn - extra, c.fp, c.tn)).mu_lower >= base
    if c.tn >= extra:  # more false positives (same n_out) can only lower it
        assert gdp_bound_from_counts(Counts(c.tp, c.fn, c.fp + extra, c.tn - extra)).mu_lower <= base
    assert gdp_bound_from_counts(c, confidence=0.99).mu_lower <= base


def test_auditor_accuracy() -> None:
    assert auditor_accuracy(Counts(tp=450, fn=50, fp=100, tn=400)) == pytest.approx(0.85)
