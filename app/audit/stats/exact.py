"""Exact (infinitely many trials) audit of Gaussian private voting from per-partition label probabilities.

When the engine exposes each partition's probability of voting each label, nothing needs sampling:

- the clean vote vector V is the sum of T independent categorical draws (a Poisson-multinomial; mass a row
  leaves below 1 is an invalid vote that counts for no label), enumerated exactly by dynamic programming
  over the T partitions;
- white-box (003 App. D): D = Ṽ[target] − Ṽ[other] = V[target] − V[other] + N(0, 2σ²) is a finite Gaussian
  mixture, so TPR(τ) = P(D ≥ τ | C1) and FPR(τ) = P(D ≥ τ | C0) are closed-form at every threshold τ;
  against the strongest other label (GAP, `other=None`), D ≥ τ iff the target wins the noisy argmax with
  its count lowered by τ, the black-box integral below at a shifted vote vector;
- black-box: P(argmax Ṽ = target | V = v) = ∫ φ(z) Π_{j≠target} Φ((v_target − v_j)/σ + z) dz, a 1-D
  integral computed by adaptive Gauss-Hermite quadrature in log space (centred on the integrand's mode,
  which is unique because the log-integrand is concave).

The population μ is max_τ Φ⁻¹(TPR(τ)) − Φ⁻¹(FPR(τ)) (white-box, over thresholds spanning the mixture ± 10
noise standard deviations), or the single decision's Φ⁻¹(TPR) − Φ⁻¹(FPR) (black-box), floored at 0; ε is
its GDP conversion at δ. The assumption-free ε (Kairouz et al. 2015: max(ln((TPR − δ)/FPR),
ln((TNR − δ)/FNR))) is computed here too, from log rates.

Every rate is computed in its own tail: FNR = P(not target | C1) and TNR = P(not target | C0) are sums of
the other labels' probabilities (black-box) or the mixture's lower tail (white-box), never 1 − TPR or
1 − FPR. At large ε the TPR is 1 − 10⁻¹⁰ or closer; 1 − TPR then loses every significant digit (or is 0),
which overstated the assumption-free ε above a correct mechanism's claim and made Φ⁻¹(TPR) infinite.

This is the value a bootstrap audit (trials.py) approaches as trials and clean samples grow. It assumes the documented release — Gaussian noise of scale σ on every count, argmax — so it
cannot see bugs in a mechanism's own release code; only the bootstrap, which runs that code, can.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.polynomial.hermite import hermgauss
from scipy import optimize, special

from app.audit.accounting.gdp import epsilon_for_mu

MAX_VOTE_VECTORS = 2_000_000
_NODES, _WEIGHTS = hermgauss(48)
_GRID_POINTS = 801
_MIN_GRID_POINTS = 41
_GRID_ROWS = 5_000  # (vote vectors × thresholds) per white-box curve against the strongest other label
_TAIL_SDS = 10.0


@dataclass(frozen=True)
class ExactAudit:
    """Population TPR/FPR and μ, ε for both access models; white-box curves over `thresholds`."""

    mu_black_box: float
    mu_white_box: float
    epsilon_black_box: float
    epsilon_white_box: float
    epsilon_black_box_assumption_free: float
    epsilon_white_box_assumption_free: float
    tpr_black_box: float
    fpr_black_box: float
    fnr_black_box: float  # from the other labels' tail, not 1 − tpr (which cancels at large ε)
    best_threshold: float
    thresholds: np.ndarray
    tpr_white_box: np.ndarray
    fpr_white_box: np.ndarray
    fnr_white_box: np.ndarray  # the C1 mixture's lower tail at each threshold
    sigma: float
    delta: float

    def as_dict(self, *, curve: bool = False) -> dict:
        """Scalars always; the white-box ROC curve (801 points) only with `curve=True`."""
        out = {
            "mu_black_box": self.mu_black_box,
            "mu_white_box": self.mu_white_box,
            "epsilon_black_box": self.epsilon_black_box,
            "epsilon_white_box": self.epsilon_white_box,
            "epsilon_black_box_assumption_free": self.epsilon_black_box_assumption_free,
            "epsilon_white_box_assumption_free": self.epsilon_white_box_assumption_free,
            "tpr_black_box": self.tpr_black_box,
            "fpr_black_box": self.fpr_black_box,
            "fnr_black_box": self.fnr_black_box,
            "best_threshold": self.best_threshold,
            "sigma": self.sigma,
            "delta": self.delta,
        }
        if curve:
            out |= {
                "thresholds": self.thresholds.tolist(),
                "tpr_white_box": self.tpr_white_box.tolist(),
                "fpr_white_box": self.fpr_white_box.tolist(),
                "fnr_white_box": self.fnr_white_box.tolist(),
            }
        return out


def exact_vote_audit(
    label_probs_in: np.ndarray,
    label_probs_out: np.ndarray,
    *,
    sigma: float,
    target: int,
    other: int | None,
    delta: float,
) -> ExactAudit:
    """Exact black- and white-box audit of private voting with C1 (`label_probs_in`) vs C0 (`_out`), (T, K).

    The white-box score is Ṽ_target − Ṽ_other, or Ṽ_target − max_{k≠target} Ṽ_k when `other` is None
    (GAP's strongest other label) — the same score `PrivateVoting.binary_view` gives the bootstrap."""
    p_in, p_out = (
        _check_probs(label_probs_in, "label_probs_in"),
        _check_probs(label_probs_out, "label_probs_out"),
    )
    if p_in.shape[1] != p_out.shape[1]:
        raise ValueError(f"C1 and C0 have different label counts: {p_in.shape[1]} vs {p_out.shape[1]}")
    k = p_in.shape[1]
    if not (0 <= target < k and (other is None or (0 <= other < k and target != other))):
        raise ValueError(f"target and other must be two different labels in 0…{k - 1}, got {target}, {other}")
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    votes_in, w_in = vote_distribution(p_in)
    votes_out, w_out = vote_distribution(p_out)

    log_tpr_bb, log_fnr_bb = _log_argmax_tails(votes_in, w_in, target, sigma)
    log_fpr_bb, log_tnr_bb = _log_argmax_tails(votes_out, w_out, target, sigma)
    mu_bb = max(0.0, float(_probit(log_tpr_bb, log_fnr_bb) - _probit(log_fpr_bb, log_tnr_bb)))
    eps_free_bb = float(assumption_free_epsilon_log(log_fnr_bb, log_fpr_bb, log_tnr_bb, log_tpr_bb, delta))

    tail_in, tail_out, lo, hi = _white_box_tails(votes_in, w_in, votes_out, w_out, target, other, sigma)
    n_grid = _GRID_POINTS
    if other is None:  # each threshold costs one quadrature per vote vector
        n_grid = int(np.clip(_GRID_ROWS // max(len(w_in), len(w_out)), _MIN_GRID_POINTS, 201))
    thresholds = np.linspace(lo, hi, n_grid)

    def mu_at(tau: np.ndarray) -> np.ndarray:
        return _probit(*tail_in(tau)) - _probit(*tail_out(tau))

    curve = mu_at(thresholds)
    best = int(np.argmax(curve))
    left, right = thresholds[max(best - 1, 0)], thresholds[min(best + 1, n_grid - 1)]
    refined = optimize.minimize_scalar(
        lambda t: -float(mu_at(np.array([t]))[0]), bounds=(left, right), method="bounded"
    )
    best_tau, mu_wb = (
        (refined.x, -refined.fun) if -refined.fun > curve[best] else (thresholds[best], curve[best])
    )
    mu_wb = max(0.0, float(mu_wb))
    (log_tpr_wb, log_fnr_wb), (log_fpr_wb, log_tnr_wb) = tail_in(thresholds), tail_out(thresholds)
    eps_free_wb = float(
        np.max(assumption_free_epsilon_log(log_fnr_wb, log_fpr_wb, log_tnr_wb, log_tpr_wb, delta))
    )
    return ExactAudit(
        mu_black_box=mu_bb,
        mu_white_box=mu_wb,
        epsilon_black_box=epsilon_for_mu(mu_bb, delta),
        epsilon_white_box=epsilon_for_mu(mu_wb, delta),
        epsilon_black_box_assumption_free=eps_free_bb,
        epsilon_white_box_assumption_free=eps_free_wb,
        tpr_black_box=float(np.exp(log_tpr_bb)),
        fpr_black_box=float(np.exp(log_fpr_bb)),
        fnr_black_box=float(np.exp(log_fnr_bb)),
        best_threshold=float(best_tau),
        thresholds=thresholds,
        tpr_white_box=np.exp(log_tpr_wb),
        fpr_white_box=np.exp(log_fpr_wb),
        fnr_white_box=np.exp(log_fnr_wb),
        sigma=float(sigma),
        delta=float(delta),
    )


def assumption_free_epsilon_log(
    log_fnr: np.ndarray | float,
    log_fpr: np.ndarray | float,
    log_tnr: np.ndarray | float,
    log_tpr: np.ndarray | float,
    delta: float,
) -> np.ndarray:
    """bounds.assumption_free_epsilon from log rates, each taken from its own tail:
    ε_af = max(0, ln(TPR − δ) − ln FPR, ln(TNR − δ) − ln FNR).

    TPR − δ = TPR·(1 − δ/TPR) is formed from log TPR, so a TPR of 1 − 10⁻¹⁵ (1 − TPR would be 0, or wrong
    in every digit) and an FNR of 10⁻³⁰⁰ both give the exact ε of the test; a rate at or below δ gives no
    bound from its side. Finite whenever the log rates are."""
    log_fnr, log_fpr, log_tnr, log_tpr = (
        np.asarray(x, dtype=np.float64) for x in (log_fnr, log_fpr, log_tnr, log_tpr)
    )
    log_delta = np.log(delta)

    def log_minus_delta(log_rate: np.ndarray) -> np.ndarray:  # ln(rate − δ), −∞ where rate ≤ δ
        with np.errstate(divide="ignore", invalid="ignore"):
            gap = log_delta - log_rate
            return np.where(gap < 0, log_rate + np.log(-np.expm1(np.minimum(gap, -1e-300))), -np.inf)

    with np.errstate(invalid="ignore"):
        direct = log_minus_delta(log_tpr) - log_fpr
        mirror = log_minus_delta(log_tnr) - log_fnr
    eps = np.fmax(direct, mirror)
    return np.where(np.isnan(eps), 0.0, np.maximum(eps, 0.0))


def vote_distribution(label_probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact law of V = Σ_t Categorical(label_probs[t]) over labels (the rest of each row: no vote).

    Dynamic programming over partitions; a vote vector is encoded in base T+1 so merging equal vectors is
    one `np.unique`. Returns the support (S, K) and its probabilities (S,), zero-probability vectors dropped.
    """
    probs = _check_probs(label_probs, "label_probs")
    t, k = probs.shape
    radix = (t + 1) ** np.arange(k, dtype=np.int64)
    if float(t + 1) ** k > 2**62:
        raise ValueError(f"{k} labels with {t} partitions is too many to enumerate exactly")
    codes: np.ndarray = np.zeros(1, dtype=np.int64)
    weights: np.ndarray = np.ones(1)
    invalid = np.clip(1.0 - probs.sum(axis=1), 0.0, 1.0)
    for row, rest in zip(probs, invalid, strict=True):
        steps = np.concatenate([[0], radix])
        step_probs = np.concatenate([[rest], row])
        live = step_probs > 0
        new_codes = (codes[:, None] + steps[live][None, :]).ravel()
        new_weights = (weights[:, None] * step_probs[live][None, :]).ravel()
        codes, inverse = np.unique(new_codes, return_inverse=True)
        weights = np.bincount(inverse, weights=new_weights)
        if codes.size > MAX_VOTE_VECTORS:
            raise ValueError(
                f"the exact vote distribution has more than {MAX_VOTE_VECTORS:,} vote vectors; "
                "use the bootstrap audit for this many labels and partitions"
            )
    votes = (codes[:, None] // radix[None, :]) % (t + 1)
    keep = weights > 0
    return votes[keep], weights[keep] / weights[keep].sum()


def log_prob_argmax(votes: np.ndarray, target: int, sigma: float) -> np.ndarray:
    """log P(argmax(v + N(0, σ²I)) = target) for each row v, by adaptive Gauss-Hermite quadrature.

    The integrand e^{g(z)}, g(z) = −z²/2 + Σ_j log Φ(a_j + z), a_j = (v_target − v_j)/σ, is log-concave:
    Newton finds its mode z*, and nodes are placed at z* + √2·ŝ·x_i with ŝ = (−g''(z*))^{−1/2}.
    """
    votes = np.asarray(votes, dtype=np.float64)
    a = (votes[:, [target]] - np.delete(votes, target, axis=1)) / sigma  # (S, K−1)
    z = np.zeros(a.shape[0])
    for _ in range(100):
        r = _mills_ratio(a + z[:, None])
        grad = -z + r.sum(axis=1)
        hess = -1.0 - (r * (a + z[:, None] + r)).sum(axis=1)
        step = grad / hess
        z = z - step
        if np.max(np.abs(step)) < 1e-10:
            break
    r = _mills_ratio(a + z[:, None])
    spread = 1.0 / np.sqrt(1.0 + (r * (a + z[:, None] + r)).sum(axis=1))
    nodes = z[:, None] + np.sqrt(2.0) * spread[:, None] * _NODES[None, :]  # (S, n)
    log_g = -(nodes**2) / 2 + special.log_ndtr(a[:, None, :] + nodes[:, :, None]).sum(axis=2)
    log_terms = np.log(_WEIGHTS)[None, :] + _NODES[None, :] ** 2 + log_g
    return np.log(spread / np.sqrt(np.pi)) + special.logsumexp(log_terms, axis=1)


def _log_argmax_tails(votes: np.ndarray, w: np.ndarray, target: int, sigma: float) -> tuple[float, float]:
    """(log P(argmax Ṽ = target), log P(argmax Ṽ ≠ target)) over the vote law: the second is the sum of the
    other labels' probabilities, accurate when the first is 1 − 10⁻¹⁵ (noise is continuous, so ties have
    probability 0 and the two sum to 1)."""
    log_w = np.log(w)
    log_hit = special.logsumexp(log_w + log_prob_argmax(votes, target, sigma))
    others = [log_prob_argmax(votes, j, sigma) for j in range(votes.shape[1]) if j != target]
    log_miss = special.logsumexp(log_w[None, :] + np.asarray(others))
    return float(log_hit), float(log_miss)


Tail = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


def _white_box_tails(
    votes_in: np.ndarray,
    w_in: np.ndarray,
    votes_out: np.ndarray,
    w_out: np.ndarray,
    target: int,
    other: int | None,
    sigma: float,
) -> tuple[Tail, Tail, float, float]:
    """(log P(D ≥ τ), log P(D < τ)) as functions of τ for C1 and C0, and the τ range to search.

    Fixed `other`: D = V_t − V_o + N(0, 2σ²), a Gaussian mixture. `other` None: D ≥ τ iff the target still
    wins the noisy argmax after its count is lowered by τ, so P(D ≥ τ | v) = P(argmax(v − τ·e_t + noise) = t)
    (`log_prob_argmax`)."""
    if other is not None:
        scale = np.sqrt(2.0) * sigma
        d_in, wd_in = _merge(votes_in[:, target] - votes_in[:, other], w_in)
        d_out, wd_out = _merge(votes_out[:, target] - votes_out[:, other], w_out)
        lo = min(d_in.min(), d_out.min()) - _TAIL_SDS * scale
        hi = max(d_in.max(), d_out.max()) + _TAIL_SDS * scale

        def mixture(d: np.ndarray, w: np.ndarray):
            return lambda tau: (_log_sf(d, w, tau, scale), _log_cdf(d, w, tau, scale))

        return mixture(d_in, wd_in), mixture(d_out, wd_out), lo, hi

    def strongest_other(votes: np.ndarray, w: np.ndarray):
        def tails(tau: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            shifted = np.repeat(votes[None, :, :], tau.size, axis=0).astype(np.float64)
            shifted[:, :, target] -= tau[:, None]
            rows = shifted.reshape(-1, votes.shape[1])

            def log_tail(labels: list[int]) -> np.ndarray:
                log_p = special.logsumexp([log_prob_argmax(rows, j, sigma) for j in labels], axis=0)
                return special.logsumexp(np.log(w)[None, :] + log_p.reshape(tau.size, -1), axis=1)

            others = [j for j in range(votes.shape[1]) if j != target]
            return log_tail([target]), log_tail(others)  # each accurate in its own tail

        return tails

    margins = [v[:, target] - np.delete(v, target, axis=1).max(axis=1) for v in (votes_in, votes_out)]
    spread = (_TAIL_SDS + 2.0) * np.sqrt(2.0) * sigma
    lo = min(m.min() for m in margins) - spread
    hi = max(m.max() for m in margins) + spread
    return strongest_other(votes_in, w_in), strongest_other(votes_out, w_out), lo, hi


def _merge(values: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of a discrete law and their total probabilities."""
    distinct, inverse = np.unique(values, return_inverse=True)
    return distinct.astype(np.float64), np.bincount(inverse, weights=weights)


def _mills_ratio(x: np.ndarray) -> np.ndarray:
    """φ(x)/Φ(x), stable for very negative x."""
    return np.exp(-(x**2) / 2 - 0.5 * np.log(2 * np.pi) - special.log_ndtr(x))


def _log_sf(d: np.ndarray, w: np.ndarray, tau: np.ndarray, scale: float) -> np.ndarray:
    """log P(d + N(0, scale²) ≥ τ) for the mixture Σ w_i δ_{d_i}."""
    return special.logsumexp(
        np.log(w)[None, :] + special.log_ndtr((d[None, :] - tau[:, None]) / scale), axis=1
    )


def _log_cdf(d: np.ndarray, w: np.ndarray, tau: np.ndarray, scale: float) -> np.ndarray:
    """log P(d + N(0, scale²) < τ) for the mixture Σ w_i δ_{d_i}."""
    return special.logsumexp(
        np.log(w)[None, :] + special.log_ndtr((tau[:, None] - d[None, :]) / scale), axis=1
    )


def _probit(log_sf: np.ndarray | float, log_cdf: np.ndarray | float) -> np.ndarray:
    """Φ⁻¹(P(D ≥ τ)) stable in both tails: from log P(D ≥ τ), or −Φ⁻¹ of log P(D < τ) when P(D ≥ τ) > ½."""
    return np.where(log_sf < np.log(0.5), special.ndtri_exp(log_sf), -special.ndtri_exp(log_cdf))


def _check_probs(label_probs: np.ndarray, name: str) -> np.ndarray:
    probs = np.asarray(label_probs, dtype=np.float64)
    if probs.ndim != 2 or probs.shape[0] == 0 or probs.shape[1] < 2:
        raise ValueError(f"{name} must be a (partitions, labels) array with at least 2 labels")
    if np.any(probs < 0) or np.any(probs.sum(axis=1) > 1 + 1e-9) or not np.all(np.isfinite(probs)):
        raise ValueError(f"{name} rows must be probabilities summing to at most 1")
    return probs
