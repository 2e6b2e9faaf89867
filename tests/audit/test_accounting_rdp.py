"""Rényi accounting of DP synthetic generation: 001 App. C, Tables 4–6 as printed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.audit.accounting.rdp import (
    data_dependent_epsilon,
    exponential_mechanism_rdp,
    rdp_to_approx_dp,
    renyi_divergence,
    solve_batch_size,
    solve_clip,
    solve_temperature,
    symmetric_renyi,
    synthetic_generation_epsilon,
    synthetic_generation_step_rdp,
    zcdp_rdp,
)

SETUP = {"delta": 1e-5, "sequences": 50, "max_new_tokens": 40}  # 001 §5 / App. C: N_gen = 50, T_max = 40


@pytest.mark.parametrize(
    ("target", "temperature", "alpha"),
    [
        (0.5, 68.58, 32),
        (1, 36.18, 18),
        (5, 8.53, 5),
        (10, 4.80, 3),
        (20, 2.81, 3),
        (50, 1.42, 2),
        (100, 0.94, 2),
    ],
)
def test_table_4_temperature(target: float, temperature: float, alpha: int) -> None:
    tau, alpha_star, eps = solve_temperature(target_epsilon=target, clip=10, batch_size=50, **SETUP)
    assert (round(tau, 2), alpha_star) == (temperature, alpha)
    assert eps == pytest.approx(target, rel=1e-9)


@pytest.mark.parametrize(
    ("target", "clip", "alpha"), [(1, 0.55, 18), (5, 2.34, 5), (10, 4.16, 3), (50, 14.12, 2), (100, 21.20, 2)]
)
def test_table_5_clip(target: float, clip: float, alpha: int) -> None:
    c, alpha_star, eps = solve_clip(target_epsilon=target, temperature=2, batch_size=50, **SETUP)
    assert (round(c, 2), alpha_star) == (clip, alpha)
    assert eps == pytest.approx(target, rel=1e-9)


@pytest.mark.parametrize(("target", "size", "alpha"), [(5, 214, 5), (10, 121, 4), (50, 36, 2)])
def test_table_6_batch_size(target: float, size: int, alpha: int) -> None:
    s, alpha_star, eps = solve_batch_size(target_epsilon=target, clip=10, temperature=2, **SETUP)
    assert (s, alpha_star) == (size, alpha)
    assert eps <= target
    assert synthetic_generation_epsilon(clip=10, batch_size=s - 1, temperature=2, **SETUP)[0] > target


def test_step_rdp_is_the_smaller_bound() -> None:
    assert zcdp_rdp(4, 10, 50, 2) == pytest.approx(4 / 2 * (10 / 100) ** 2)
    for alpha in (2, 5, 30):
        for c, s, tau in [(10, 50, 2), (10, 50, 0.1), (1, 1, 0.5)]:
            e = 2 * c / (s * tau)
            naive = math.log((math.sinh(alpha * e) - math.sinh((alpha - 1) * e)) / math.sinh(e)) / (alpha - 1)
            assert exponential_mechanism_rdp(alpha, e) == pytest.approx(
                min(alpha / 2 * e * e, naive), rel=1e-9
            )
            step = synthetic_generation_step_rdp(alpha, c, s, tau)
            assert step == pytest.approx(min(zcdp_rdp(alpha, c, s, tau), exponential_mechanism_rdp(alpha, e)))
    # Very large α·ε must not overflow (sinh(2000) is inf in floating point); the bound tends to ε.
    assert exponential_mechanism_rdp(100, 20.0) == pytest.approx(20.0, rel=0.01)


def test_rdp_to_approx_dp_is_algorithm_2() -> None:
    eps, alpha = rdp_to_approx_dp(lambda a: 0.01 * a, 1e-5)
    by_hand = [
        0.01 * a + math.log((a - 1) / a) - (math.log(1e-5) + math.log(a)) / (a - 1) for a in range(2, 101)
    ]
    assert eps == pytest.approx(min(by_hand))
    assert alpha == 2 + int(np.argmin(by_hand))


def test_renyi_divergence_against_brute_force() -> None:
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
    for alpha in (1.5, 2, 18):
        brute = math.log(np.sum(q * (p / q) ** alpha)) / (alpha - 1)
        assert renyi_divergence(np.log(p), np.log(q), alpha) == pytest.approx(brute, rel=1e-10)
        assert symmetric_renyi(np.log(p), np.log(q), alpha) == pytest.approx(
            max(brute, math.log(np.sum(p * (q / p) ** alpha)) / (alpha - 1)), rel=1e-10
        )
    assert renyi_divergence(np.log(p), np.log(p), 3) == pytest.approx(0.0, abs=1e-12)
    with np.errstate(divide="ignore"):
        zero = np.log(np.array([0.5, 0.5, 0.0]))
        full = np.log(np.array([0.4, 0.4, 0.2]))
    assert renyi_divergence(full, zero, 2) == math.inf  # P not absolutely continuous w.r.t. Q
    assert math.isfinite(renyi_divergence(zero, full, 2))
    # Stable for very peaked distributions (log-probabilities of −1000 underflow in linear space).
    assert math.isfinite(renyi_divergence(np.array([0.0, -1000.0]), np.array([-1e-300, -900.0]), 32))


def test_data_dependent_epsilon_is_theorem_c8_doubled() -> None:
    total, alpha, delta = 0.3, 18, 1e-5
    converted = total + math.log(17 / 18) - (math.log(delta) + math.log(18)) / 17
    assert data_dependent_epsilon(total, alpha, delta) == pytest.approx(2 * converted)


def test_exponential_mechanism_rdp_is_stable_at_tiny_and_large_epsilon() -> None:
    for alpha, e in [(2, 0.3), (10, 1.0), (50, 0.05)]:  # the sinh form, where it is well conditioned
        direct = math.log((math.sinh(alpha * e) - math.sinh((alpha - 1) * e)) / math.sinh(e)) / (alpha - 1)
        assert exponential_mechanism_rdp(alpha, e) == pytest.approx(min(alpha / 2 * e * e, direct), rel=1e-9)
    # ε_EM = 2e-18 used to raise "math domain error" (log of 1 − 1); ε_EM = 1e4 overflowed sinh.
    assert 0.0 <= exponential_mechanism_rdp(2, 2e-18) <= 4e-36
    assert exponential_mechanism_rdp(100, 1e4) == pytest.approx(1e4, rel=1e-3)
