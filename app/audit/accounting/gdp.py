"""Gaussian differential privacy (GDP): μ ↔ (ε, δ).

A mechanism is μ-GDP when distinguishing its outputs on neighbours is no easier than telling N(0, 1) from
N(μ, 1) (Dong, Roth & Su 2022). μ-GDP holds iff (ε, δ(ε; μ))-DP holds for every ε ≥ 0, with
(003 §2, the GDP-to-DP conversion)

    δ(ε; μ) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2).

The same curve is the exact privacy profile of the Gaussian mechanism with σ/Δ₂ = 1/μ (Balle & Wang 2018,
Eq. 6), so the inversions use dp_accounting's exact Gaussian calibration.
"""

from __future__ import annotations

import math

import dp_accounting
from scipy.special import log_ndtr


def delta_for_epsilon(epsilon: float, mu: float) -> float:
    """δ(ε; μ) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2), evaluated in log space (log_ndtr) so large μ is exact.

    μ ≤ 0 is no leakage (δ = 0); μ = ∞ is total leakage (δ = 1).
    """
    if epsilon < 0:
        raise ValueError(f"epsilon must be ≥ 0, got {epsilon}")
    if mu <= 0:
        return 0.0
    if math.isinf(mu):
        return 1.0
    log_a = float(log_ndtr(-epsilon / mu + mu / 2))
    log_b = epsilon + float(log_ndtr(-epsilon / mu - mu / 2))
    if log_b >= log_a:
        return 0.0
    return math.exp(log_a) * -math.expm1(log_b - log_a)


def epsilon_for_mu(mu: float, delta: float) -> float:
    """The smallest ε ≥ 0 with δ(ε; μ) ≤ δ (003 §2's ε_emp^GDP); 0 for μ ≤ 0, ∞ for μ = ∞.

    Solved by dp_accounting.get_epsilon_gaussian(σ = 1/μ, δ) (root finding on the log of the same curve).
    """
    _check_delta(delta)
    if mu <= 0:
        return 0.0
    if math.isinf(mu):
        return math.inf
    return float(dp_accounting.get_epsilon_gaussian(1.0 / mu, delta))


def mu_for_epsilon(epsilon: float, delta: float) -> float:
    """The μ whose GDP curve passes through (ε, δ): the inverse of `epsilon_for_mu` (μ = Δ₂/σ_analytic)."""
    _check_delta(delta)
    if epsilon < 0:
        raise ValueError(f"epsilon must be ≥ 0, got {epsilon}")
    if math.isinf(epsilon):
        return math.inf
    sigma = float(dp_accounting.get_sigma_gaussian(epsilon, delta))
    return math.inf if sigma == 0 else 1.0 / sigma


def _check_delta(delta: float) -> None:
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
