"""GDP ↔ (ε, δ) conversion and Gaussian-mechanism calibration (003 §2; Balle & Wang 2018)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import norm

from app.audit.accounting.gaussian import (
    VOTE_SENSITIVITY,
    analytic_sigma,
    classic_sigma,
    esa_sensitivity,
    gaussian_mu,
)
from app.audit.accounting.gdp import delta_for_epsilon, epsilon_for_mu, mu_for_epsilon


def test_delta_matches_the_formula_where_it_is_well_conditioned() -> None:
    for eps, mu in [(0.0, 1.0), (1.0, 1.0), (2.0, 0.5), (3.0, 2.0)]:
        direct = norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)
        assert delta_for_epsilon(eps, mu) == pytest.approx(direct, rel=1e-12)
    assert delta_for_epsilon(0.0, 1.0) == pytest.approx(2 * norm.cdf(0.5) - 1, rel=1e-12)


def test_large_mu_is_computed_in_log_space() -> None:
    # Φ(−ε/μ + μ/2) and e^ε Φ(−ε/μ − μ/2) are both ≈ 1 here; the naive difference loses every digit.
    eps = epsilon_for_mu(40.0, 1e-10)
    assert delta_for_epsilon(eps, 40.0) == pytest.approx(1e-10, rel=1e-6)
    assert eps > 700  # e^ε overflows a float: only the log-space evaluation survives


def test_edge_values() -> None:
    assert delta_for_epsilon(1.0, 0.0) == 0.0
    assert delta_for_epsilon(1.0, -2.0) == 0.0
    assert delta_for_epsilon(1.0, math.inf) == 1.0
    assert epsilon_for_mu(0.0, 1e-5) == 0.0
    assert epsilon_for_mu(-1.0, 1e-5) == 0.0
    assert epsilon_for_mu(math.inf, 1e-5) == math.inf
    assert epsilon_for_mu(1e-4, 0.5) == 0.0  # δ(0; μ) = 2Φ(μ/2) − 1 ≤ δ already
    with pytest.raises(ValueError, match="delta"):
        epsilon_for_mu(1.0, 0.0)
    with pytest.raises(ValueError, match="epsilon"):
        delta_for_epsilon(-1.0, 1.0)


@given(mu=st.floats(0.05, 20.0), log_delta=st.floats(-12, -1))
def test_epsilon_for_mu_is_the_smallest_epsilon_reaching_delta(mu: float, log_delta: float) -> None:
    delta = 10.0**log_delta
    eps = epsilon_for_mu(mu, delta)
    assert eps >= 0
    if eps > 0:
        assert delta_for_epsilon(eps, mu) == pytest.approx(delta, rel=1e-6)
        assert delta_for_epsilon(eps * 0.999, mu) > delta
    assert mu_for_epsilon(eps, delta) == pytest.approx(mu, rel=1e-6) if eps > 1e-6 else True


@given(eps=st.floats(0.0, 30.0), step=st.floats(0.01, 5.0), mu=st.floats(0.01, 30.0))
def test_delta_decreases_in_epsilon_and_increases_in_mu(eps: float, step: float, mu: float) -> None:
    d = delta_for_epsilon(eps, mu)
    assert 0.0 <= d <= 1.0
    assert delta_for_epsilon(eps + step, mu) <= d
    assert delta_for_epsilon(eps, mu * 1.1) >= d


def test_classic_sigma_textbook_values() -> None:
    # σ = Δ₂·√(2 ln(1.25/δ))/ε; 003's private voting: Δ₂ = √2 → σ = 2√(ln(1.25/δ))/ε.
    assert classic_sigma(1.0, 1e-5, 1.0) == pytest.approx(4.844805, rel=1e-6)
    assert classic_sigma(1.0, 1e-5, VOTE_SENSITIVITY) == pytest.approx(2 * math.sqrt(math.log(1.25e5)))
    assert classic_sigma(0.5, 1e-5, 2.0) == pytest.approx(4 * 4.844805, rel=1e-6)


def test_analytic_sigma_is_exact_and_tighter_than_classic() -> None:
    for eps in (0.1, 0.5, 1.0, 4.0, 8.0):
        sigma = analytic_sigma(eps, 1e-5, 1.0)
        # The analytic σ puts δ(ε; Δ₂/σ) exactly at δ — the definition of the analytic Gaussian mechanism.
        assert delta_for_epsilon(eps, gaussian_mu(1.0, sigma)) == pytest.approx(1e-5, rel=1e-6)
        if eps < 1:  # the classic formula is valid (and loose) for ε < 1
            assert sigma < classic_sigma(eps, 1e-5, 1.0)
            assert delta_for_epsilon(eps, 1.0 / classic_sigma(eps, 1e-5, 1.0)) < 1e-5
    assert analytic_sigma(1.0, 1e-5, 1.0) == pytest.approx(3.730632, rel=1e-6)  # Balle & Wang 2018
    assert analytic_sigma(1.0, 1e-5, 2.0) == pytest.approx(2 * analytic_sigma(1.0, 1e-5, 1.0))


def test_sensitivities_and_mu() -> None:
    assert esa_sensitivity(10) == pytest.approx(0.2)  # 003 Lemma A.1: 2/T
    assert esa_sensitivity(10, tight=False) == 1.0  # Wu et al. 2024
    assert gaussian_mu(math.sqrt(2), 2.0) == pytest.approx(math.sqrt(2) / 2)
    assert gaussian_mu(1.0, 0.0) == math.inf
    # μ = Δ₂/σ_analytic converts back to the calibrated ε.
    sigma = analytic_sigma(2.0, 1e-6, VOTE_SENSITIVITY)
    assert epsilon_for_mu(gaussian_mu(VOTE_SENSITIVITY, sigma), 1e-6) == pytest.approx(2.0, rel=1e-6)
    for bad in [(0.0, 1e-5, 1.0), (1.0, 0.0, 1.0), (1.0, 1e-5, 0.0)]:
        with pytest.raises(ValueError):
            classic_sigma(*bad)
    with pytest.raises(ValueError):
        esa_sensitivity(0)


def test_inversions_agree_with_dp_accounting_gaussian_calibration() -> None:
    import dp_accounting

    for mu in (0.05, 0.5, 1.0, 5.0, 40.0):
        for delta in (1e-10, 1e-5, 0.1):
            expected = dp_accounting.get_epsilon_gaussian(1.0 / mu, delta)
            assert epsilon_for_mu(mu, delta) == pytest.approx(expected, rel=1e-9, abs=1e-12)
    for eps in (0.1, 1.0, 8.0):
        assert mu_for_epsilon(eps, 1e-5) == pytest.approx(
            1 / dp_accounting.get_sigma_gaussian(eps, 1e-5), rel=1e-9
        )


def test_classic_calibration_breaks_its_claim_above_the_crossover() -> None:
    """Issue 9 item 5: the exact ε at δ of the classic σ (dp_accounting's exact Gaussian accountant as the
    reference) crosses the claim at ε ≈ 8.42 (δ = 1e-5) and ≈ 7.46 (δ = 1e-3); at ε = 10 it is 10.39."""
    import dp_accounting
    from scipy.optimize import brentq

    from app.audit.accounting.gaussian import calibration_check, gaussian_calibration, gaussian_epsilon
    from app.audit.mechanisms.base import calibrate, claimed_theory

    def excess(eps: float, delta: float) -> float:
        return dp_accounting.get_epsilon_gaussian(classic_sigma(eps, delta, 1.0), delta) - eps

    assert round(brentq(excess, 1, 20, args=(1e-5,)), 2) == 8.42
    assert round(brentq(excess, 1, 20, args=(1e-3,)), 2) == 7.46
    assert gaussian_epsilon(classic_sigma(10, 1e-5, 1.0), 1.0, 1e-5) == pytest.approx(10.3939, abs=1e-4)
    for eps, delta, valid in [(1, 1e-5, True), (8.4, 1e-5, True), (8.45, 1e-5, False), (7.5, 1e-3, False)]:
        assert calibration_check(eps, delta, classic_sigma(eps, delta, 2.0), 2.0)[0] is valid
        analytic = gaussian_calibration(eps, delta, sensitivity=2.0, analytic=True)
        assert analytic["calibration_valid"] and analytic["warning"] is None
        assert analytic["epsilon_exact_at_delta"] == pytest.approx(eps, rel=1e-6)
    classic = gaussian_calibration(10, 1e-5)
    assert classic["calibration_valid"] is False and "analytic" in classic["warning"]
    assert classic["epsilon_exact_at_delta"] == pytest.approx(10.3939, abs=1e-4)
    assert gaussian_calibration(1, 1e-5)["warning"] is None
    theory = calibrate(10.0, 1e-5, VOTE_SENSITIVITY, "classic").as_dict()
    assert theory["calibration_valid"] is False and theory["epsilon_exact_at_delta"] > 10.39
    assert theory["epsilon_exact_at_delta"] == theory["epsilon_ceiling"]
    assert calibrate(10.0, 1e-5, VOTE_SENSITIVITY, "analytic").calibration_valid is True
    assert calibrate(1.0, 1e-5, VOTE_SENSITIVITY, "classic").as_dict()["calibration_valid"] is True
    bare = claimed_theory(1.0, 1e-5).as_dict()
    assert bare["calibration_valid"] is None and bare["epsilon_exact_at_delta"] is None
