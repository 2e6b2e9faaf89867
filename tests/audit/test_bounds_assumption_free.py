"""The assumption-free lower bound, the verdict rule and the per-test confidence (issue 9).

The coverage tests simulate randomized response (RR): a mechanism that is exactly (ε, 0)-DP but not
Gaussian, answering "in" with probability e^ε/(1 + e^ε) on C1 and 1/(1 + e^ε) on C0.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from app.audit.accounting.gdp import epsilon_for_mu
from app.audit.stats.bounds import (
    Counts,
    assumption_free_epsilon,
    assumption_free_epsilon_lower,
    gdp_bound_from_counts,
    gdp_mu_lower,
    per_test_confidence,
    verdict_epsilon,
)
from app.audit.stats.thresholds import Bonferroni, InSample, Split, bound_from_scores


def _reference_epsilon(counts: Counts, confidence: float, delta: float) -> float:
    """Brute force: the largest ε on a grid such that every (TPR, FPR) in the joint Clopper-Pearson region
    (scipy's exact interval; one-sided level (1 − γ)/2 = the two-sided interval at level γ) breaks
    TPR ≤ e^ε FPR + δ or TNR ≤ e^ε FNR + δ."""
    tpr_low = stats.binomtest(counts.tp, counts.n_in).proportion_ci(confidence, method="exact").low
    fpr_high = stats.binomtest(counts.fp, counts.n_out).proportion_ci(confidence, method="exact").high
    tpr = np.linspace(tpr_low, 1, 201)[:, None]
    fpr = np.linspace(0, fpr_high, 201)[None, :]
    best = 0.0
    for eps in np.arange(0, 8, 0.001):
        ok_direct = tpr <= math.exp(eps) * fpr + delta
        ok_mirror = 1 - fpr <= math.exp(eps) * (1 - tpr) + delta
        if (ok_direct & ok_mirror).any():  # some point of the region is (ε, δ)-DP: ε not refuted
            break
        best = eps
    return best


def test_issue_numbers_900_100() -> None:
    c = Counts(tp=900, fn=100, fp=100, tn=900)
    fnr_ub = stats.beta.ppf(0.975, 101, 900)
    fpr_ub = stats.beta.ppf(0.975, 101, 900)
    # δ = 0: ln(TPR_lower / FPR_upper) = ln(0.8797/0.1203) = 1.99 (the issue's number).
    at_zero = float(assumption_free_epsilon(fnr_ub, fpr_ub, 0.0))
    assert at_zero == pytest.approx(math.log((1 - fnr_ub) / fpr_ub), rel=1e-9)
    assert round(at_zero, 2) == 1.99
    # GDP at δ = 1e-5 (at δ = 0 it is ∞ for every μ > 0): μ_lower = 2.347 → ε = 12.2; the assumption-free
    # bound at the same δ barely moves (−δ in the numerator).
    b = gdp_bound_from_counts(c, confidence=0.95, delta=1e-5)
    assert round(b.epsilon_empirical, 1) == 12.2
    assert b.epsilon_empirical_assumption_free == pytest.approx(math.log((1 - fnr_ub - 1e-5) / fpr_ub))
    assert b.assumption == "gdp" and b.epsilon_lower == b.epsilon_empirical
    d = gdp_bound_from_counts(c, assumption="none").as_dict()
    assert d["assumption"] == "none" and d["epsilon_empirical_assumption_free"] == pytest.approx(1.9897, 1e-4)


@pytest.mark.parametrize(
    ("tp", "fn", "fp", "tn", "delta"),
    [(900, 100, 100, 900, 0.0), (40, 10, 3, 47, 0.0), (731, 269, 269, 731, 1e-3), (5, 45, 44, 6, 0.0),
     (50, 0, 0, 50, 0.01), (30, 70, 10, 90, 0.0)],
)  # fmt: skip
def test_matches_brute_force_over_the_region(tp: int, fn: int, fp: int, tn: int, delta: float) -> None:
    c = Counts(tp, fn, fp, tn)
    ours = float(
        assumption_free_epsilon_lower(np.array([tp]), c.n_in, np.array([fp]), c.n_out, 0.025, delta)[0]
    )
    reference = _reference_epsilon(c, 0.95, delta)
    assert reference <= ours + 1e-6 and ours - reference < 0.02


def test_exact_rates_and_edges() -> None:
    # Exact RR rates give exactly ε; FPR = 0 with TPR > δ is ∞; a useless test is 0.
    p = 1 / (1 + math.exp(-1.0))
    assert float(assumption_free_epsilon(1 - p, 1 - p, 0.0)) == pytest.approx(1.0)
    assert float(assumption_free_epsilon(0.5, 0.0, 0.0)) == math.inf
    assert float(assumption_free_epsilon(1.0, 1.0, 0.0)) == 0.0
    assert float(assumption_free_epsilon(0.5, 0.5, 0.0)) == 0.0
    # The mirror side: an anti-correlated test carries no evidence in either direction.
    assert gdp_bound_from_counts(Counts(100, 900, 900, 100)).epsilon_empirical_assumption_free == 0.0
    # The mirror alone: TNR high, FNR low but FPR high too.
    mirror = gdp_bound_from_counts(Counts(tp=999, fn=1, fp=500, tn=500), delta=1e-5)
    assert mirror.epsilon_empirical_assumption_free > 2


def test_verdict_rule_and_per_test_confidence() -> None:
    b = gdp_bound_from_counts(Counts(731, 269, 269, 731))
    assert verdict_epsilon(b, "gdp") == b.epsilon_empirical
    assert verdict_epsilon(b, "none") == b.epsilon_empirical_assumption_free
    with pytest.raises(ValueError, match="assumption"):
        verdict_epsilon(b, "gaussian")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="assumption"):
        gdp_bound_from_counts(Counts(1, 1, 1, 1), assumption="x")  # type: ignore[arg-type]
    assert per_test_confidence(0.95, 2) == pytest.approx(0.975)
    assert per_test_confidence(0.95, 1) == 0.95
    with pytest.raises(ValueError, match="n_tests"):
        per_test_confidence(0.95, 0)


def test_gdp_route_overstates_randomized_response() -> None:
    """Why the verdict rule exists: RR at exactly (1, 0)-DP has TPR 0.731 / FPR 0.269; the GDP route reads
    μ = Φ⁻¹(0.731) − Φ⁻¹(0.269) = 1.23 and converts it to ε = 5.58 at δ = 1e-5 — a false violation of ε = 1.
    The assumption-free value of the same rates is 1.0."""
    mu = stats.norm.ppf(0.731) - stats.norm.ppf(0.269)
    assert round(epsilon_for_mu(mu, 1e-5), 2) == 5.58
    assert float(assumption_free_epsilon(0.269, 0.269, 1e-5)) == pytest.approx(1.0, abs=1e-3)
    # With 5000 trials per side both bounds are tight to their own route: GDP flags ε = 1, the other not.
    rng = np.random.default_rng(20260)
    q = 1 / (1 + math.exp(-1.0))
    tp, fp = rng.binomial(5000, q), rng.binomial(5000, 1 - q)
    b = gdp_bound_from_counts(Counts(tp, 5000 - tp, fp, 5000 - fp), delta=1e-5)
    assert b.epsilon_empirical > 4 and b.epsilon_empirical_assumption_free <= 1.0


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("n", [50, 500, 5000])
def test_coverage_on_randomized_response(epsilon: float, n: int) -> None:
    """≥ 95 % coverage: in 1000 seeded repetitions of n RR trials per side at exactly (ε, 0)-DP, the
    assumption-free lower bound exceeds ε in ≤ 5 % (the union bound allows 2 × 2.5 %; seen: 0.1–3 %)."""
    reps = 1000
    rng = np.random.default_rng([9, n, int(epsilon * 10)])
    q = 1 / (1 + math.exp(-epsilon))
    tp, fp = rng.binomial(n, q, reps), rng.binomial(n, 1 - q, reps)
    eps = assumption_free_epsilon_lower(tp, n, fp, n, 0.025, 0.0)
    assert np.mean(eps > epsilon) <= 0.05
    # The GDP route on the same data: it exceeds the true ε in most repetitions once n ≥ 500 (seen: all).
    gdp = [epsilon_for_mu(mu, 1e-5) for mu in gdp_mu_lower(tp[:100], n, fp[:100], n, 0.025)]
    if n >= 500:
        assert np.mean(np.array(gdp) > epsilon) >= 0.9
    # Through the bound object too (δ = 1e-5 only lowers it), on the first repetitions.
    for i in range(5):
        b = gdp_bound_from_counts(Counts(int(tp[i]), n - int(tp[i]), int(fp[i]), n - int(fp[i])), delta=1e-5)
        assert b.epsilon_empirical_assumption_free <= eps[i] + 1e-12


@pytest.mark.parametrize("strategy", [Split(seed=1), Bonferroni(max_thresholds=30), InSample()])
def test_threshold_chosen_for_the_assumption(strategy: object) -> None:
    rng = np.random.default_rng(4)
    s_in, s_out = rng.normal(1.5, 1, 3000), rng.normal(0, 1, 3000)
    gdp = bound_from_scores(s_in, s_out, strategy=strategy, delta=1e-5)
    free = bound_from_scores(s_in, s_out, strategy=strategy, delta=1e-5, assumption="none")
    assert gdp.assumption == "gdp" and free.assumption == "none"
    assert free.epsilon_empirical_assumption_free > 0 and gdp.mu_lower > 0
    if not isinstance(strategy, Split):  # same data for choice and bound: each choice wins its own objective
        assert free.epsilon_empirical_assumption_free >= gdp.epsilon_empirical_assumption_free
        assert gdp.mu_lower >= free.mu_lower
    # Both reported at the chosen threshold, from its counts.
    again = gdp_bound_from_counts(free.counts, confidence=free.confidence, delta=1e-5, assumption="none")
    if not isinstance(strategy, Bonferroni):
        assert again.epsilon_empirical_assumption_free == free.epsilon_empirical_assumption_free
    with pytest.raises(ValueError, match="assumption"):
        bound_from_scores(s_in, s_out, strategy=strategy, assumption="both")  # type: ignore[arg-type]


def test_assumption_free_coverage_with_threshold_selection() -> None:
    """Scores from a non-Gaussian ε = 1 mechanism (Laplace-noised bit, ε = 1 by the Laplace mechanism):
    with the split and Bonferroni strategies the bound stays ≤ 1 in ≥ 95 % of 200 seeded repetitions."""
    over = {"split": 0, "bonferroni": 0}
    for rep in range(200):
        rng = np.random.default_rng([7, rep])
        s_in, s_out = 1 + rng.laplace(0, 1, 2000), rng.laplace(0, 1, 2000)
        for strategy in (Split(seed=rep), Bonferroni(max_thresholds=20)):
            b = bound_from_scores(s_in, s_out, strategy=strategy, delta=1e-5, assumption="none")
            over[strategy.name] += b.epsilon_empirical_assumption_free > 1.0
    assert over["split"] <= 10 and over["bonferroni"] <= 10


def test_coverage_with_delta_on_a_tight_binary_mechanism() -> None:
    """A binary mechanism that is exactly (1, 0.05)-DP — P[1 | C0] = (1 − δ)/(1 + e^ε), P[1 | C1] = 1 − that,
    so TPR = e^ε·FPR + δ and TNR = e^ε·FNR + δ hold with equality: the δ term must be subtracted, or the
    bound would overshoot. 1000 seeded repetitions of 5000 trials per side: ε_af > 1 in ≤ 5 %."""
    epsilon, delta, n = 1.0, 0.05, 5000
    p0 = (1 - delta) / (1 + math.exp(epsilon))
    rng = np.random.default_rng([9, 1, 1])
    tp, fp = rng.binomial(n, 1 - p0, 1000), rng.binomial(n, p0, 1000)
    assert np.mean(assumption_free_epsilon_lower(tp, n, fp, n, 0.025, delta) > epsilon) <= 0.05
    # Ignoring δ (reading the same data at δ = 0) overshoots far more often: the δ term matters.
    assert (
        np.mean(assumption_free_epsilon_lower(tp, n, fp, n, 0.025, 0.0) > epsilon) > 0.5
    )  # seen: 0.69 (and 0.008 with δ)
