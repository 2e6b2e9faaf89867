"""Rényi accounting of DP synthetic generation: 001 App. C, Tables 4–6 as printed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.audit.accounting.rdp import (
    EMPIRICAL_ORDERS,
    exponential_mechanism_rdp,
    rdp_curve_epsilon,
    rdp_to_approx_dp,
    renyi_divergence,
    solve_batch_size,
    solve_clip,
    solve_temperature,
    svt_rdp,
    symmetric_renyi,
    symmetric_renyi_curve,
    synthetic_generation_epsilon,
    synthetic_generation_parameters,
    synthetic_generation_rdp,
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


def _c8(rdp_value: float, alpha: float, delta: float) -> float:
    """001 Thm C.8 by hand."""
    return rdp_value + math.log((alpha - 1) / alpha) - (math.log(delta) + math.log(alpha)) / (alpha - 1)


def test_curve_conversion_is_c8_minimized_over_the_orders() -> None:
    """rdp_curve_epsilon (dp_accounting) = min over the orders of Thm C.8 where the KL case does not apply,
    no doubling; the best order is reported."""
    orders = [2.0, 5.0, 18.0, 64.0, 256.0]
    curve = [0.02 * a for a in orders]
    eps, alpha = rdp_curve_epsilon(orders, curve, 1e-5)
    by_hand = [_c8(r, a, 1e-5) for a, r in zip(orders, curve, strict=True)]
    assert eps == pytest.approx(min(by_hand), rel=1e-12)
    assert alpha == orders[int(np.argmin(by_hand))]
    # a curve that is zero or below δ²-level KL gives ε = 0 (dp_accounting's KL case), never a constant term
    assert rdp_curve_epsilon(orders, [0.0] * 5, 1e-5)[0] == 0.0
    assert rdp_curve_epsilon(orders, [1e-12 * a for a in orders], 1e-5)[0] == 0.0
    with pytest.raises(ValueError, match="delta"):
        rdp_curve_epsilon(orders, curve, 1.0)


def test_curve_conversion_tracks_the_measured_rdp() -> None:
    """ε of a measured curve shrinks with the curve (the old 2·conv(α*, δ) did not): ε is monotone in the curve,
    and a curve at 1e-4 of the theory's gives under 2 % of ε_theory (the floor is about log(1/δ)/α_max)."""
    setup = {"clip": 10.0, "batch_size": 10, "temperature": 14.0, "steps": 12}
    orders = sorted({*EMPIRICAL_ORDERS, 18})
    theory = [synthetic_generation_rdp(a, **setup) for a in orders]
    eps_theory, _ = rdp_to_approx_dp(lambda a: synthetic_generation_rdp(a, **setup), 1e-5)
    # the theory's own curve converts to at most Alg. 2's ε (α* is on the grid; same formula)
    assert rdp_curve_epsilon(orders, theory, 1e-5)[0] <= eps_theory + 1e-12
    values = [rdp_curve_epsilon(orders, [f * v for v in theory], 1e-5)[0] for f in (1e-4, 1e-3, 1e-2, 0.1)]
    assert values == sorted(values) and values[0] < 0.02 * eps_theory
    assert values[2] < 0.2 * eps_theory


def test_symmetric_renyi_curve_equals_the_pointwise_divergence() -> None:
    rng = np.random.default_rng(5)
    log_p = np.log(rng.dirichlet(np.ones(7)))
    log_qs = np.log(rng.dirichlet(np.ones(7), size=3))
    orders = [1.25, 2.0, 7.0, 64.0]
    curve = symmetric_renyi_curve(log_p, log_qs, orders)
    assert curve.shape == (4, 3)
    for i, a in enumerate(orders):
        for j in range(3):
            assert curve[i, j] == pytest.approx(symmetric_renyi(log_p, log_qs[j], a), rel=1e-9, abs=1e-15)
    assert symmetric_renyi_curve(log_p, log_p[None, :], orders) == pytest.approx(np.zeros((4, 1)), abs=1e-15)


def test_svt_theory_is_amin_theorem_1() -> None:
    """Sparse vector variant: only r private tokens pay, each ε_step + α·2/(sσ)² (Amin et al. Thm 1)."""
    c, s, tau, sigma, r = 10.0, 10, 3.0, 1.0, 8
    assert svt_rdp(4.0, s, sigma) == pytest.approx(4.0 * 2 / (s * sigma) ** 2)
    curve = synthetic_generation_rdp(5.0, clip=c, batch_size=s, temperature=tau, steps=r, svt_noise=sigma)
    assert curve == pytest.approx(
        r * (synthetic_generation_step_rdp(5.0, c, s, tau) + 5.0 * 2 / (s * sigma) ** 2)
    )
    common = {
        "clip": c,
        "batch_size": s,
        "temperature": tau,
        "sequences": 2,
        "max_new_tokens": 6,
        "delta": 1e-5,
    }
    eps, alpha = synthetic_generation_epsilon(**common, svt_noise=sigma, private_tokens=r)
    assert (eps, alpha) == rdp_to_approx_dp(
        lambda a: r * (synthetic_generation_step_rdp(a, c, s, tau) + svt_rdp(a, s, sigma)), 1e-5
    )
    # r is capped at N_gen·T_max; without r every token may be private
    assert synthetic_generation_epsilon(**common, svt_noise=sigma, private_tokens=10**6) == (
        synthetic_generation_epsilon(**common, svt_noise=sigma)
    )
    # fewer private tokens cost less; the SVT term costs extra over the simplified run of the same r tokens
    assert synthetic_generation_epsilon(**common, svt_noise=sigma, private_tokens=2)[0] < eps
    simplified_r = rdp_to_approx_dp(lambda a: r * synthetic_generation_step_rdp(a, c, s, tau), 1e-5)[0]
    assert eps > simplified_r
    # the calculator passes the variant through, and solving τ for a target includes the SVT term
    solved = synthetic_generation_parameters(
        delta=1e-5, sequences=2, max_new_tokens=6, clip=c, batch_size=s, target_epsilon=5.0,
        solve_for="temperature", svt_noise=sigma, private_tokens=r,
    )  # fmt: skip
    again = synthetic_generation_epsilon(
        **{**common, "temperature": solved["temperature"]}, svt_noise=sigma, private_tokens=r
    )
    assert again[0] == pytest.approx(solved["epsilon"]) and solved["epsilon"] <= 5.0 + 1e-9
    with pytest.raises(ValueError, match="not reachable"):  # the SVT term alone exceeds the target
        solve_temperature(
            target_epsilon=1.0, delta=1e-5, clip=c, batch_size=s, sequences=2, max_new_tokens=6,
            svt_noise=0.05, private_tokens=r,
        )  # fmt: skip


def test_exponential_mechanism_rdp_is_stable_at_tiny_and_large_epsilon() -> None:
    for alpha, e in [(2, 0.3), (10, 1.0), (50, 0.05)]:  # the sinh form, where it is well conditioned
        direct = math.log((math.sinh(alpha * e) - math.sinh((alpha - 1) * e)) / math.sinh(e)) / (alpha - 1)
        assert exponential_mechanism_rdp(alpha, e) == pytest.approx(min(alpha / 2 * e * e, direct), rel=1e-9)
    # ε_EM = 2e-18 used to raise "math domain error" (log of 1 − 1); ε_EM = 1e4 overflowed sinh.
    assert 0.0 <= exponential_mechanism_rdp(2, 2e-18) <= 4e-36
    assert exponential_mechanism_rdp(100, 1e4) == pytest.approx(1e4, rel=1e-3)
