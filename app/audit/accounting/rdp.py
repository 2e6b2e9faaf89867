"""Rényi-DP accounting of DP synthetic text generation (001 App. C; the mechanism of Amin et al., 001's [1]).

Each generated token is one run of 001 Alg. 1: softmax of the mean of s clipped logit vectors at
temperature τ, with clip bound c. Per step (001 Eq. 8 and the bound after it):

    zCDP (Thm C.2 → C.3):        ε(α) = α/2 · (c/(sτ))²
    exponential mechanism (C.5): ε(α) = min(α/2·ε_EM², 1/(α−1)·log[(sinh(αε_EM) − sinh((α−1)ε_EM))/sinh(ε_EM)]),
                                 ε_EM = 2c/(sτ) (C.4 with Δ = c/(sτ))
    per step:                    the smaller of the two.

N_gen sequences × T_max tokens compose additively (Thm C.7); RDP → (ε, δ) by Thm C.8 minimized over
integer orders α = 2 … 100 (Alg. 2); τ, c are found by bisection (Alg. 3) and s as the smallest integer.
Data-dependent leakage (ICLInf): the symmetric Rényi divergence of two next-token distributions (Eqs. 5–7),
summed over tokens, converted at the theory's α*, then doubled for bounded adjacency (Thm C.9).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np
from scipy.special import logsumexp

ORDERS = range(2, 101)
_BISECTION_STEPS = 60


def zcdp_rdp(alpha: float, clip: float, batch_size: int, temperature: float) -> float:
    """ε(α) = α/2·(c/(sτ))² — ρ-zCDP with ρ = ½(c/(sτ))² (Thm C.2) as RDP (Thm C.3, 001 Eq. 8)."""
    return alpha / 2 * (clip / (batch_size * temperature)) ** 2


def exponential_mechanism_rdp(alpha: float, epsilon_em: float) -> float:
    """RDP of an ε_EM-DP exponential mechanism (Thm C.5): min(α/2·ε², log[(sinh αε − sinh (α−1)ε)/sinh ε]/(α−1)).

    With sinh A − sinh B = 2 cosh((A+B)/2) sinh((A−B)/2) and sinh ε = 2 sinh(ε/2) cosh(ε/2), the ratio is
    cosh((2α−1)ε/2)/cosh(ε/2), evaluated as a difference of log cosh: no overflow at large α·ε and no
    log of zero at tiny ε (where the subtraction of two nearly equal sinh values lost every digit).
    """
    if epsilon_em <= 0:
        return 0.0
    e = epsilon_em
    ratio = (_log_cosh((2 * alpha - 1) * e / 2) - _log_cosh(e / 2)) / (alpha - 1)
    return max(0.0, min(alpha / 2 * e * e, ratio))


def _log_cosh(x: float) -> float:
    """log cosh x = |x| + log1p(e^{−2|x|}) − log 2, finite for every float x."""
    x = abs(x)
    return x + math.log1p(math.exp(-2 * x)) - math.log(2)


def synthetic_generation_step_rdp(alpha: float, clip: float, batch_size: int, temperature: float) -> float:
    """One token of 001 Alg. 1: min(zCDP bound, exponential-mechanism bound with ε_EM = 2c/(sτ))."""
    epsilon_em = 2 * clip / (batch_size * temperature)
    return min(zcdp_rdp(alpha, clip, batch_size, temperature), exponential_mechanism_rdp(alpha, epsilon_em))


def rdp_to_approx_dp(
    rdp: Callable[[int], float], delta: float, orders: Iterable[int] = ORDERS
) -> tuple[float, int]:
    """001 Alg. 2: min over α of ε_RDP(α) + log((α−1)/α) − (log δ + log α)/(α−1) (Thm C.8); returns (ε*, α*).

    Ties keep the smaller α (the first order reaching the minimum), as Alg. 2's strict `<` does.
    """
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    best_eps, best_alpha = math.inf, 0
    for alpha in orders:
        eps = _rdp_to_dp(rdp(alpha), alpha, delta)
        if eps < best_eps:
            best_eps, best_alpha = eps, alpha
    return best_eps, best_alpha


def synthetic_generation_epsilon(
    *, clip: float, batch_size: int, temperature: float, sequences: int, max_new_tokens: int, delta: float
) -> tuple[float, int]:
    """(ε*, α*) of N_gen sequences × T_max tokens: Alg. 2 on N_gen·T_max·ε_step(α) (Thm C.7)."""
    _check_positive(clip=clip, batch_size=batch_size, temperature=temperature)
    steps = sequences * max_new_tokens
    if steps < 1:
        raise ValueError("sequences and max_new_tokens must be ≥ 1")
    return rdp_to_approx_dp(
        lambda a: steps * synthetic_generation_step_rdp(a, clip, batch_size, temperature), delta
    )


def solve_temperature(
    *,
    target_epsilon: float,
    delta: float,
    clip: float,
    batch_size: int,
    sequences: int,
    max_new_tokens: int,
    iterations: int = _BISECTION_STEPS,
) -> tuple[float, int, float]:
    """001 Alg. 3: bisection on τ (ε decreases as τ grows) → (τ*, α*, ε*) with ε* ≤ ε_target at τ*'s upper end."""

    def eps(tau: float) -> float:
        return synthetic_generation_epsilon(
            clip=clip, batch_size=batch_size, temperature=tau, sequences=sequences,
            max_new_tokens=max_new_tokens, delta=delta,
        )[0]  # fmt: skip

    tau = _bisect_decreasing(eps, target_epsilon, iterations)
    eps_star, alpha_star = synthetic_generation_epsilon(
        clip=clip, batch_size=batch_size, temperature=tau, sequences=sequences,
        max_new_tokens=max_new_tokens, delta=delta,
    )  # fmt: skip
    return tau, alpha_star, eps_star


def solve_clip(
    *,
    target_epsilon: float,
    delta: float,
    temperature: float,
    batch_size: int,
    sequences: int,
    max_new_tokens: int,
    iterations: int = _BISECTION_STEPS,
) -> tuple[float, int, float]:
    """Alg. 3 on the clip bound c (ε increases with c) → (c*, α*, ε*) (001 Table 5)."""

    def eps(clip: float) -> float:
        return synthetic_generation_epsilon(
            clip=clip, batch_size=batch_size, temperature=temperature, sequences=sequences,
            max_new_tokens=max_new_tokens, delta=delta,
        )[0]  # fmt: skip

    clip = _bisect_decreasing(lambda inv: eps(1 / inv), target_epsilon, iterations)
    clip = 1 / clip
    eps_star, alpha_star = synthetic_generation_epsilon(
        clip=clip, batch_size=batch_size, temperature=temperature, sequences=sequences,
        max_new_tokens=max_new_tokens, delta=delta,
    )  # fmt: skip
    return clip, alpha_star, eps_star


def solve_batch_size(
    *,
    target_epsilon: float,
    delta: float,
    clip: float,
    temperature: float,
    sequences: int,
    max_new_tokens: int,
) -> tuple[int, int, float]:
    """The smallest integer s with ε(s) ≤ ε_target (ε decreases in s) → (s*, α*, ε*) (001 Table 6)."""

    def result(s: int) -> tuple[float, int]:
        return synthetic_generation_epsilon(
            clip=clip, batch_size=s, temperature=temperature, sequences=sequences,
            max_new_tokens=max_new_tokens, delta=delta,
        )  # fmt: skip

    _check_positive(target_epsilon=target_epsilon)
    lo, hi = 0, 1  # invariant: ε(lo) > target (lo = 0 stands for "no batch"), ε(hi) ≤ target
    while result(hi)[0] > target_epsilon:
        lo, hi = hi, hi * 2
        if hi > 2**40:
            raise ValueError(f"no batch size reaches ε = {target_epsilon} at δ = {delta}")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if result(mid)[0] <= target_epsilon else (mid, hi)
    eps_star, alpha_star = result(hi)
    return hi, alpha_star, eps_star


def renyi_divergence(log_p: np.ndarray, log_q: np.ndarray, alpha: float) -> float:
    """D_α(P‖Q) = 1/(α−1) · log Σ_x P(x)^α Q(x)^{1−α} (001 Eq. 5), by logsumexp; ∞ if P ≪ Q fails."""
    if alpha <= 1:
        raise ValueError(f"alpha must be > 1, got {alpha}")
    log_p, log_q = np.asarray(log_p, dtype=np.float64), np.asarray(log_q, dtype=np.float64)
    if log_p.shape != log_q.shape:
        raise ValueError(f"distributions differ in shape: {log_p.shape} vs {log_q.shape}")
    support = log_p > -np.inf
    if np.any(log_q[support] == -np.inf):
        return math.inf
    terms = alpha * log_p[support] + (1 - alpha) * log_q[support]
    return max(0.0, float(logsumexp(terms)) / (alpha - 1))


def symmetric_renyi(log_p: np.ndarray, log_q: np.ndarray, alpha: float) -> float:
    """D_α↔(P‖Q) = max(D_α(P‖Q), D_α(Q‖P)) (001 Eq. 6)."""
    return max(renyi_divergence(log_p, log_q, alpha), renyi_divergence(log_q, log_p, alpha))


def data_dependent_epsilon(total_rdp: float, alpha: int, delta: float) -> float:
    """ε_empirical = 2·(ε_A^{(1:T)} + log((α−1)/α) − (log δ + log α)/(α−1)) (Thm C.8, then ×2 by Thm C.9)."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    return 2 * _rdp_to_dp(total_rdp, alpha, delta)


def _rdp_to_dp(rdp_value: float, alpha: float, delta: float) -> float:
    return rdp_value + math.log((alpha - 1) / alpha) - (math.log(delta) + math.log(alpha)) / (alpha - 1)


def _bisect_decreasing(eps: Callable[[float], float], target: float, iterations: int) -> float:
    """Alg. 3 on a parameter x > 0 with ε(x) decreasing: bracket [ℓ, h] with ε(ℓ) > target ≥ ε(h), halve
    `iterations` times, return the midpoint (Alg. 3 line 13)."""
    _check_positive(target_epsilon=target)
    lo, hi = 0.0, 1.0
    while eps(hi) > target:
        lo, hi = hi, hi * 2
        if hi > 1e12:
            raise ValueError(f"ε = {target} is not reachable at this δ")
    for _ in range(iterations):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if eps(mid) > target else (lo, mid)
    return (lo + hi) / 2


def _check_positive(**values: float) -> None:
    for name, value in values.items():
        if not value > 0:
            raise ValueError(f"{name} must be > 0, got {value}")


SOLVE_FOR = ("temperature", "clip", "batch_size")


def synthetic_generation_parameters(
    *,
    delta: float,
    sequences: int,
    max_new_tokens: int,
    clip: float | None = None,
    batch_size: int | None = None,
    temperature: float | None = None,
    target_epsilon: float | None = None,
    solve_for: str | None = None,
) -> dict:
    """The calculator behind the CLI and POST /v1/accounting/synthetic-generation.

    With `solve_for` (temperature | clip | batch_size) that parameter is found for `target_epsilon`
    (001 Alg. 3); without it, ε of the given parameters. Returns {temperature, clip, batch_size, alpha, epsilon}.
    """
    params = {"temperature": temperature, "clip": clip, "batch_size": batch_size}
    common = {"delta": delta, "sequences": sequences, "max_new_tokens": max_new_tokens}
    if solve_for is not None and solve_for not in SOLVE_FOR:
        raise ValueError(f"solve_for must be one of {', '.join(SOLVE_FOR)}, got {solve_for!r}")
    missing = [name for name, value in params.items() if value is None and name != solve_for]
    if missing:
        raise ValueError(
            f"{missing[0]} is required" + (f" when solving for {solve_for}" if solve_for else "")
        )
    if solve_for is None:
        eps, alpha = synthetic_generation_epsilon(
            clip=clip, batch_size=batch_size, temperature=temperature, **common
        )
        return {**params, "alpha": alpha, "epsilon": eps}
    if target_epsilon is None:
        raise ValueError(f"target_epsilon is required when solving for {solve_for}")
    if solve_for == "temperature":
        value, alpha, eps = solve_temperature(
            target_epsilon=target_epsilon, clip=clip, batch_size=batch_size, **common
        )
    elif solve_for == "clip":
        value, alpha, eps = solve_clip(
            target_epsilon=target_epsilon, temperature=temperature, batch_size=batch_size, **common
        )
    else:
        value, alpha, eps = solve_batch_size(
            target_epsilon=target_epsilon, clip=clip, temperature=temperature, **common
        )
    return {**params, solve_for: value, "alpha": alpha, "epsilon": eps}
