"""Calibrating the Gaussian mechanism, and its own μ on the GDP scale.

- classic (Dwork & Roth 2014, Thm A.1; proved for ε < 1): σ = Δ₂·√(2 ln(1.25/δ))/ε. 003 §2 uses it for private
  voting with Δ₂ = √2 (one exemplar moves two vote counts by 1): σ = 2√(ln(1.25/δ))/ε. Its exact ε at δ
  (`gaussian_epsilon`) stays below the claim up to ε ≈ 8.42 at δ = 1e-5 (≈ 7.46 at 1e-3) and exceeds it
  above (ε = 10 → 10.39 at δ = 1e-5), so `calibration_check` reports whether a calibration keeps its claim.
- analytic (Balle & Wang 2018, exact for every ε): the smallest σ with δ(ε; Δ₂/σ) ≤ δ, via dp_accounting.
- The released statistic with noise N(0, σ²I) and L2 sensitivity Δ₂ is μ-GDP with μ = Δ₂/σ, so a mechanism's
  theoretical ε and an audit's empirical ε sit on the same scale (accounting/gdp.py).
"""

from __future__ import annotations

import math

import dp_accounting

from app.audit.accounting.gdp import epsilon_for_mu

CALIBRATION_RTOL = 1e-6
"""Relative slack of `calibration_check` (the analytic σ meets the claim up to its root search's accuracy)."""

VOTE_SENSITIVITY = math.sqrt(2.0)
"""L2 sensitivity of a private-voting histogram: one changed partition moves two counts by one (003 §2)."""


def esa_sensitivity(partitions: int, *, tight: bool = True) -> float:
    """L2 sensitivity of ESA's mean of T unit-norm embeddings: 2/T (003 Lemma A.1) or 1 (Wu et al. 2024)."""
    if partitions < 1:
        raise ValueError(f"partitions must be ≥ 1, got {partitions}")
    return 2.0 / partitions if tight else 1.0


def classic_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """σ = Δ₂·√(2 ln(1.25/δ))/ε (classic Gaussian mechanism; 003 §2 with Δ₂ = √2)."""
    _check(epsilon, delta, sensitivity)
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def analytic_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """The exact smallest σ for (ε, δ)-DP (Balle & Wang 2018, Alg. 1), dp_accounting.get_sigma_gaussian × Δ₂."""
    _check(epsilon, delta, sensitivity)
    return sensitivity * float(dp_accounting.get_sigma_gaussian(epsilon, delta))


def gaussian_mu(sensitivity: float, sigma: float) -> float:
    """μ = Δ₂/σ: the Gaussian mechanism's GDP parameter (∞ when σ = 0)."""
    if sensitivity < 0 or sigma < 0:
        raise ValueError(f"sensitivity and sigma must be ≥ 0, got {sensitivity}, {sigma}")
    if sigma == 0:
        return math.inf
    return sensitivity / sigma


def gaussian_epsilon(sigma: float, sensitivity: float, delta: float) -> float:
    """The exact ε at δ of the Gaussian mechanism N(0, σ²I) at L2 sensitivity Δ₂: ε(μ = Δ₂/σ) on the GDP
    curve δ(ε; μ) (Balle & Wang 2018, Thm 8; accounting/gdp.py)."""
    return epsilon_for_mu(gaussian_mu(sensitivity, sigma), delta)


def calibration_check(epsilon: float, delta: float, sigma: float, sensitivity: float) -> tuple[bool, float]:
    """(calibration_valid, epsilon_exact_at_delta): whether σ really gives (ε, δ)-DP, and the exact ε at δ."""
    exact = gaussian_epsilon(sigma, sensitivity, delta)
    return exact <= epsilon * (1 + CALIBRATION_RTOL), exact


def _check(epsilon: float, delta: float, sensitivity: float) -> None:
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    if not sensitivity > 0:
        raise ValueError(f"sensitivity must be > 0, got {sensitivity}")


def gaussian_calibration(
    epsilon: float, delta: float, *, sensitivity: float = 1.0, analytic: bool = False
) -> dict:
    """The calculator behind the CLI and POST /v1/accounting/gaussian: σ for (ε, δ)-DP at Δ₂, its μ = Δ₂/σ,
    the exact ε at δ of that σ, and a `warning` (None when the calibration keeps its claim)."""
    sigma = (analytic_sigma if analytic else classic_sigma)(epsilon, delta, sensitivity)
    valid, exact = calibration_check(epsilon, delta, sigma, sensitivity)
    warning = None
    if not valid:
        warning = (
            f"the classic calibration is not (ε, δ)-DP here: σ = {sigma:.6g} gives ε = {exact:.6g} at "
            f"δ = {delta:g}, above the claimed {epsilon:g}; use analytic (Balle & Wang 2018) for an exact σ"
        )
    return {
        "sigma": sigma,
        "mu": gaussian_mu(sensitivity, sigma),
        "method": "analytic" if analytic else "classic",
        "epsilon_exact_at_delta": exact,
        "calibration_valid": valid,
        "warning": warning,
    }
