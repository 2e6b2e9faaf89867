"""Rényi-DP accounting of DP synthetic text generation (001 App. C; the mechanism of Amin et al., 001's [1]).

Each generated token is one run of 001 Alg. 1: softmax of the mean of s clipped logit vectors at
temperature τ, with clip bound c. Per step (001 Eq. 8 and the bound after it):

    zCDP (Thm C.2 → C.3):        ε(α) = α/2 · (c/(sτ))²
    exponential mechanism (C.5): ε(α) = min(α/2·ε_EM², 1/(α−1)·log[(sinh(αε_EM) − sinh((α−1)ε_EM))/sinh(ε_EM)]),
                                 ε_EM = 2c/(sτ) (C.4 with Δ = c/(sτ))
    per step:                    the smaller of the two.

N_gen sequences × T_max tokens compose additively (Thm C.7); RDP → (ε, δ) by Thm C.8 minimized over
integer orders α = 2 … 100 (Alg. 2); τ, c are found by bisection (Alg. 3) and s as the smallest integer.
Full Amin et al. algorithm (public logits + sparse vector, variant "svt"): only the r private tokens pay, each
the step bound above plus one AboveThreshold run of the sparse vector test (Amin et al. 2024, Thm 1:
ρ = r·(½(c/(sτ))² + 2/(sσ)²), the SVT term being the ½ε²-zCDP of ε_SVT = 2/(sσ)-DP, Laplace noise σ and 2σ on a
query of sensitivity 1/s).

Data-dependent leakage (ICLInf): the symmetric Rényi divergence of two next-token distributions (Eqs. 5–7)
at every order of `EMPIRICAL_ORDERS`, summed over tokens (the measured RDP curve), converted to (ε, δ) by
`rdp_curve_epsilon`: dp_accounting's RDP conversion (Balle et al. 2020 Thm 21 = Canonne-Kamath-Steinke 2020
Prop. 12 = 001 Thm C.8, with its KL case giving ε = 0 when δ² > 1 − e^{−ε_RDP}) minimized over the orders.
No ×2: Thm C.9 is a pure-DP statement, and both curves are remove-one (add/remove) RDP (the theory's Δ = c/(sτ)
is the add/remove sensitivity of Amin et al.'s Lemma 3/4).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon
from scipy.special import logsumexp

ORDERS = range(2, 101)
EMPIRICAL_ORDERS: tuple[float, ...] = (
    *(1.25, 1.5, 1.75),
    *range(2, 21),
    *(24, 28, 32, 40, 48, 56, 64, 80, 100, 128, 160, 192, 256, 384, 512, 1024),
)
"""Orders at which the data-dependent RDP curve is measured (the theory's α* ∈ 2…100 is added per run, so the
curve's (ε, δ) is never above the theory's when the curve lies below the theory's)."""
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


def svt_rdp(alpha: float, batch_size: int, svt_noise: float) -> float:
    """RDP of one AboveThreshold run of Amin et al.'s sparse vector test: α·2/(sσ)².

    The query d(Z, z_pub) = ‖(1/s)Σ_p softmax(z_p) − softmax(z_pub)‖₁ (Amin et al. Eq. 2) changes by at most
    1/s when one prompt is removed; threshold noise Lap(σ) and query noise Lap(2σ) make one run (until the
    first "above", i.e. one private token) ε_SVT = 2/(sσ)-DP (Dwork & Roth Thm 3.23), which is
    ½ε_SVT²-zCDP (Bun & Steinke Prop. 1.4), i.e. RDP α·2/(sσ)² (Thm C.3) — Amin et al. Thm 1's SVT term.
    """
    return alpha * 2 / (batch_size * svt_noise) ** 2


def synthetic_generation_rdp(
    alpha: float,
    *,
    clip: float,
    batch_size: int,
    temperature: float,
    steps: int,
    svt_noise: float | None = None,
) -> float:
    """The theory's RDP curve at α: `steps` private tokens, each ε_step(α) (Thm C.7), plus with the sparse
    vector test one AboveThreshold run per private token (Amin et al. Thm 1: r·(ε_step + SVT term))."""
    per_token = synthetic_generation_step_rdp(alpha, clip, batch_size, temperature)
    if svt_noise is not None:
        per_token += svt_rdp(alpha, batch_size, svt_noise)
    return steps * per_token


def synthetic_generation_epsilon(
    *,
    clip: float,
    batch_size: int,
    temperature: float,
    sequences: int,
    max_new_tokens: int,
    delta: float,
    svt_noise: float | None = None,
    private_tokens: int | None = None,
) -> tuple[float, int]:
    """(ε*, α*) by Alg. 2 on the theory's RDP curve.

    Simplified Alg. 1: every one of the N_gen·T_max tokens is private (Thm C.7). With the sparse vector test
    (`svt_noise` σ given) only the r = `private_tokens` (at most N_gen·T_max) private tokens pay, each with its
    SVT run: RDP(α) = r·(ε_step(α) + α·2/(sσ)²) (Amin et al. Thm 1).
    """
    _check_positive(clip=clip, batch_size=batch_size, temperature=temperature)
    steps = sequences * max_new_tokens
    if steps < 1:
        raise ValueError("sequences and max_new_tokens must be ≥ 1")
    if svt_noise is not None:
        _check_positive(svt_noise=svt_noise)
        steps = min(steps, private_tokens or steps)
    return rdp_to_approx_dp(
        lambda a: synthetic_generation_rdp(
            a, clip=clip, batch_size=batch_size, temperature=temperature, steps=steps, svt_noise=svt_noise
        ),
        delta,
    )


def rdp_curve_epsilon(
    orders: Iterable[float], rdp_values: Iterable[float], delta: float
) -> tuple[float, float]:
    """(ε, α) of an RDP curve: dp_accounting's `compute_epsilon`, i.e. min over the orders of
    ε_RDP(α) + log((α−1)/α) − (log δ + log α)/(α−1) (Balle et al. 2020 Thm 21; Canonne, Kamath & Steinke 2020
    Prop. 12; the same formula as 001 Thm C.8), and ε = 0 where δ² > 1 − e^{−ε_RDP(α)} (the KL bound)."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    eps, order = compute_epsilon(list(orders), list(rdp_values), delta)
    return float(eps), float(order)


def solve_temperature(
    *,
    target_epsilon: float,
    delta: float,
    clip: float,
    batch_size: int,
    sequences: int,
    max_new_tokens: int,
    svt_noise: float | None = None,
    private_tokens: int | None = None,
    iterations: int = _BISECTION_STEPS,
) -> tuple[float, int, float]:
    """001 Alg. 3: bisection on τ (ε decreases as τ grows) → (τ*, α*, ε*) with ε* ≤ ε_target at τ*'s upper end."""

    def eps(tau: float) -> float:
        return synthetic_generation_epsilon(
            clip=clip, batch_size=batch_size, temperature=tau, sequences=sequences,
            max_new_tokens=max_new_tokens, delta=delta, svt_noise=svt_noise, private_tokens=private_tokens,
        )[0]  # fmt: skip

    tau = _bisect_decreasing(eps, target_epsilon, iterations)
    eps_star, alpha_star = synthetic_generation_epsilon(
        clip=clip, batch_size=batch_size, temperature=tau, sequences=sequences,
        max_new_tokens=max_new_tokens, delta=delta, svt_noise=svt_noise, private_tokens=private_tokens,
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
    svt_noise: float | None = None,
    private_tokens: int | None = None,
    iterations: int = _BISECTION_STEPS,
) -> tuple[float, int, float]:
    """Alg. 3 on the clip bound c (ε increases with c) → (c*, α*, ε*) (001 Table 5)."""

    def eps(clip: float) -> float:
        return synthetic_generation_epsilon(
            clip=clip, batch_size=batch_size, temperature=temperature, sequences=sequences,
            max_new_tokens=max_new_tokens, delta=delta, svt_noise=svt_noise, private_tokens=private_tokens,
        )[0]  # fmt: skip

    clip = _bisect_decreasing(lambda inv: eps(1 / inv), target_epsilon, iterations)
    clip = 1 / clip
    eps_star, alpha_star = synthetic_generation_epsilon(
        clip=clip, batch_size=batch_size, temperature=temperature, sequences=sequences,
        max_new_tokens=max_new_tokens, delta=delta, svt_noise=svt_noise, private_tokens=private_tokens,
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
    svt_noise: float | None = None,
    private_tokens: int | None = None,
) -> tuple[int, int, float]:
    """The smallest integer s with ε(s) ≤ ε_target (ε decreases in s) → (s*, α*, ε*) (001 Table 6)."""

    def result(s: int) -> tuple[float, int]:
        return synthetic_generation_epsilon(
            clip=clip, batch_size=s, temperature=temperature, sequences=sequences,
            max_new_tokens=max_new_tokens, delta=delta, svt_noise=svt_noise, private_tokens=private_tokens,
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


def symmetric_renyi_curve(log_p: np.ndarray, log_qs: np.ndarray, orders: Iterable[float]) -> np.ndarray:
    """D_α↔(P‖Q_j) (001 Eq. 6) for every order (rows) and every Q_j (columns of `log_qs`, shape (n, V)).

    Both distributions must have full support (softmax of clipped logits does). log Σ P^α Q^{1−α} is taken
    as log Σ P·exp((α−1)(log P − log Q)) by logsumexp, clipped at 0 (rounding of a zero divergence).
    """
    log_p = np.asarray(log_p, dtype=np.float64)
    log_qs = np.atleast_2d(np.asarray(log_qs, dtype=np.float64))
    ratio = log_p[None, :] - log_qs
    out = []
    for alpha in orders:
        if alpha <= 1:
            raise ValueError(f"alpha must be > 1, got {alpha}")
        forward = logsumexp(log_p[None, :] + (alpha - 1) * ratio, axis=1)
        backward = logsumexp(log_qs - (alpha - 1) * ratio, axis=1)
        out.append(np.maximum(np.maximum(forward, backward), 0.0) / (alpha - 1))
    return np.asarray(out)


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
    svt_noise: float | None = None,
    private_tokens: int | None = None,
) -> dict:
    """The calculator behind the CLI and POST /v1/accounting/synthetic-generation.

    With `solve_for` (temperature | clip | batch_size) that parameter is found for `target_epsilon`
    (001 Alg. 3); without it, ε of the given parameters. With `svt_noise` σ, the full Amin et al. algorithm:
    only `private_tokens` r (default N_gen·T_max) tokens pay, each with its sparse-vector run (Amin et al. Thm 1).
    Returns {temperature, clip, batch_size, alpha, epsilon}.
    """
    params = {"temperature": temperature, "clip": clip, "batch_size": batch_size}
    common: dict[str, Any] = {  # what every accountant call below takes
        "delta": delta,
        "sequences": sequences,
        "max_new_tokens": max_new_tokens,
        "svt_noise": svt_noise,
        "private_tokens": private_tokens,
    }
    if solve_for is not None and solve_for not in SOLVE_FOR:
        raise ValueError(f"solve_for must be one of {', '.join(SOLVE_FOR)}, got {solve_for!r}")
    missing = [name for name, value in params.items() if value is None and name != solve_for]
    if missing:
        raise ValueError(
            f"{missing[0]} is required" + (f" when solving for {solve_for}" if solve_for else "")
        )
    if solve_for is None:
        assert clip is not None and batch_size is not None and temperature is not None  # not `missing`
        eps, alpha = synthetic_generation_epsilon(
            clip=clip, batch_size=batch_size, temperature=temperature, **common
        )
        return {**params, "alpha": alpha, "epsilon": eps}
    if target_epsilon is None:
        raise ValueError(f"target_epsilon is required when solving for {solve_for}")
    if solve_for == "temperature":
        assert clip is not None and batch_size is not None
        value, alpha, eps = solve_temperature(
            target_epsilon=target_epsilon, clip=clip, batch_size=batch_size, **common
        )
    elif solve_for == "clip":
        assert temperature is not None and batch_size is not None
        value, alpha, eps = solve_clip(
            target_epsilon=target_epsilon, temperature=temperature, batch_size=batch_size, **common
        )
    else:
        assert clip is not None and temperature is not None
        value, alpha, eps = solve_batch_size(
            target_epsilon=target_epsilon, clip=clip, temperature=temperature, **common
        )
    return {**params, solve_for: value, "alpha": alpha, "epsilon": eps}
