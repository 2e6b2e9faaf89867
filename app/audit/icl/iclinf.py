"""ICLInf: the data-dependent privacy loss of in-context exemplars (001 §3, Eqs. 3–4, App. B).

Pure numpy. For one query x' with exemplar set S (|S| = k) the leave-one-out loss of position i is

    L_i = max_{y ∈ Y} | log A(S, x')_y − log A(S ∖ {e_i}, x')_y |,

and the query's loss is max_i L_i. Eq. 4 averages that over m queries:

    ICLInf^ = (1/m) Σ_j max_i L_{j,i}.

`A` is the model's output distribution: renormalized over the label set (001 §4.2) or the full
next-token vocabulary (001 App. E.1), optionally calibrated (001 App. B, Zhao et al. 2021):

    A_cal ∝ diag((p_cf + ε)^{-1}) · p,    p_cf = the content-free distribution.

Which content-free inputs give p_cf (`CONTENT_FREE_INPUTS`): 001 App. B names one, "the same prompt
template with the content left blank" (`blank`: the query ""); the method it cites (Zhao et al. 2021,
§4 "Contextual Calibration") averages the label probabilities of three content-free inputs, "N/A", ""
and "[MASK]" (`zhao2021`): p_cf = normalize((1/n) Σ_c p(· | S, c)).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CALIBRATION_EPSILON = 1e-6
"""The small ε of 001 App. B: W = diag((p_cf + ε)^{-1})."""

CONTENT_FREE_INPUTS: dict[str, tuple[str, ...]] = {"blank": ("",), "zhao2021": ("N/A", "", "[MASK]")}
"""The queries of the content-free inputs: 001 App. B's blank content, or Zhao et al. 2021's three."""


def renormalize(logprobs: np.ndarray) -> np.ndarray:
    """Log-probabilities renormalized along the last axis: log p_y − log Σ_{y'} p_{y'}."""
    logprobs = np.asarray(logprobs, dtype=np.float64)
    top = np.max(logprobs, axis=-1, keepdims=True)
    log_total = top + np.log(np.sum(np.exp(logprobs - top), axis=-1, keepdims=True))
    return logprobs - log_total


def calibrate(
    logprobs: np.ndarray, content_free_logprobs: np.ndarray, epsilon: float = CALIBRATION_EPSILON
) -> np.ndarray:
    """001 App. B: log of normalize(p / (p_cf + ε)) along the last axis.

    Both inputs are log-distributions over the same outputs (already renormalized); the result is
    a renormalized log-distribution.
    """
    log_weight = -np.log(np.exp(np.asarray(content_free_logprobs, dtype=np.float64)) + epsilon)
    return renormalize(np.asarray(logprobs, dtype=np.float64) + log_weight)


def content_free_distribution(logprobs: np.ndarray) -> np.ndarray:
    """p_cf from the log-distributions of n content-free inputs (axis 0, each already renormalized):
    log normalize((1/n) Σ_c p_c) along the last axis (Zhao et al. 2021 average probabilities)."""
    logprobs = np.asarray(logprobs, dtype=np.float64)
    top = np.max(logprobs, axis=0)
    top = np.where(np.isfinite(top), top, 0.0)
    mean = top + np.log(np.mean(np.exp(logprobs - top), axis=0))
    return renormalize(mean)


def max_abs_log_ratio(log_p: np.ndarray, log_q: np.ndarray) -> np.ndarray:
    """max_y |log p_y − log q_y| along the last axis (outputs impossible under both count as 0)."""
    log_p = np.asarray(log_p, dtype=np.float64)
    log_q = np.asarray(log_q, dtype=np.float64)
    both_impossible = np.isneginf(log_p) & np.isneginf(log_q)
    diff = np.where(both_impossible, 0.0, np.abs(log_p - np.where(both_impossible, 0.0, log_q)))
    return np.max(diff, axis=-1)


def leave_one_out_losses(full: np.ndarray, removed: np.ndarray) -> np.ndarray:
    """The per-position losses L_i of one query (the bracket of Eq. 4 before the max over S).

    `full`: log A(S, x'), shape (Y,). `removed`: log A(S ∖ {e_i}, x') for i = 0..k−1, shape (k, Y).
    Returns shape (k,).
    """
    full = np.asarray(full, dtype=np.float64)
    removed = np.asarray(removed, dtype=np.float64)
    if removed.ndim != 2 or removed.shape[1] != full.shape[-1]:
        raise ValueError(f"removed must have shape (k, {full.shape[-1]}), got {removed.shape}")
    return max_abs_log_ratio(full[None, :], removed)


@dataclass(frozen=True)
class ICLInfSummary:
    """Eq. 4 over m queries: `iclinf` (mean of per-query max), `iclinf_std` (population std of the
    per-query maxima, ddof = 0), `per_position` (mean L_i by removed position, 001 Fig. 1)."""

    iclinf: float
    iclinf_std: float
    per_position: tuple[float, ...]
    per_query: tuple[float, ...]


def summarize(losses: np.ndarray) -> ICLInfSummary:
    """Eq. 4 from the (m, k) matrix of per-position losses L_{j,i}."""
    losses = np.asarray(losses, dtype=np.float64)
    if losses.ndim != 2 or losses.shape[0] == 0 or losses.shape[1] == 0:
        raise ValueError(f"losses must have shape (m, k) with m, k ≥ 1, got {losses.shape}")
    per_query = losses.max(axis=1)
    return ICLInfSummary(
        iclinf=float(per_query.mean()),
        iclinf_std=float(per_query.std()),
        per_position=tuple(float(v) for v in losses.mean(axis=0)),
        per_query=tuple(float(v) for v in per_query),
    )
