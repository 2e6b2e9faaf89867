"""Gaussian differential privacy (GDP): μ ↔ (ε, δ).

A mechanism is μ-GDP when distinguishing its outputs on neighbours is no easier than telling N(0, 1) from
N(μ, 1) (Dong, Roth & Su 2022). μ-GDP holds iff (ε, δ(ε; μ))-DP holds for every ε ≥ 0, with
(003 §2, the GDP-to-DP conversion)

    δ(ε; μ) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2).

The same curve is the exact privacy profile of the Gaussian mechanism with σ/Δ₂ = 1/μ (Balle & Wang 2018,
Eq. 6). Both inversions are root searches on log δ, computed with scipy.special.log_ndtr (fast enough to
run once per threshold candidate; tests check them against dp_accounting's Gaussian calibration).
"""

from __future__ import annotations

import math

from scipy.optimize import brentq
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
    return math.exp(_log_delta(epsilon, mu))


def _log_delta(epsilon: float, mu: float) -> float:
    """log δ(ε; μ) = log Φ(a) + log(1 − e^{ε + log Φ(b) − log Φ(a)}), a = −ε/μ + μ/2, b = −ε/μ − μ/2."""
    log_a = float(log_ndtr(-epsilon / mu + mu / 2))
    log_b = epsilon + float(log_ndtr(-epsilon / mu - mu / 2))
    if log_b >= log_a:
        return -math.inf
    return log_a + math.log(-math.expm1(log_b - log_a))


def epsilon_for_mu(mu: float, delta: float) -> float:
    """The smallest ε ≥ 0 with δ(ε; μ) ≤ δ (003 §2's ε_emp^GDP); 0 for μ ≤ 0, ∞ for μ = ∞.

    δ(ε; μ) decreases in ε, so bracket and solve log δ(ε; μ) = log δ with Brent's method.
    """
    _check_delta(delta)
    if mu <= 0:
        return 0.0
    if math.isinf(mu):
        return math.inf
    target = math.log(delta)
    if _log_delta(0.0, mu) <= target:
        return 0.0
    lo, hi = 0.0, 1.0
    while _log_delta(hi, mu) > target:
        lo, hi = hi, 2 * hi
    return float(brentq(lambda e: _log_delta(e, mu) - target, lo, hi, xtol=1e-12, rtol=1e-12))


def mu_for_epsilon(epsilon: float, delta: float) -> float:
    """The μ whose GDP curve passes through (ε, δ): the inverse of `epsilon_for_mu` (μ = Δ₂/σ_analytic).

    δ(ε; μ) increases in μ, so bracket and solve log δ(ε; μ) = log δ with Brent's method.
    """
    _check_delta(delta)
    if epsilon < 0:
        raise ValueError(f"epsilon must be ≥ 0, got {epsilon}")
    if math.isinf(epsilon):
        return math.inf
    target = math.log(delta)
    lo, hi = 0.0, 1.0
    while _log_delta(epsilon, hi) < target:
        lo, hi = hi, 2 * hi
    return float(
        brentq(
            lambda m: _log_delta(epsilon, m) - target if m > 0 else -math.inf, lo, hi, xtol=1e-14, rtol=1e-12
        )
    )


def _check_delta(delta: float) -> None:
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
