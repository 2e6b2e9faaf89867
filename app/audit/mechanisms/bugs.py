"""Planted implementation bugs — the mistakes 003 §1 warns about — for the auditor's power.

Each is a `bug` option of the private-voting mechanism. The buggy mechanism still *claims* the
original (ε, δ) (its `Theory` is computed for the correct σ); only its release or partitioning
code changes. Not every bug breaks DP everywhere, so each one declares `breaks` (where the released
mechanism is no longer (ε, δ)-DP, δ = 1e-5, Δ₂ = √2) and `setting` (request fields of an oracle audit
in that region; the tests and docs/results/soundness.py flag each bug there in ≥ 90 % of 20 seeds).

| bug | what the code does | where it breaks DP |
|---|---|---|
| `noise_divided_by_t` | noise std σ/T | T > 1 (at T = 1 it is the correct σ) |
| `sensitivity_one` | σ calibrated for Δ₂ = 1, i.e. μ·√2 | ε(√2·μ_theory) > ε: analytic σ at every ε; classic σ above ε ≈ 0.36 (classic's slack absorbs it below; at classic ε = 1 the excess is 1.10 vs 1, too thin for either threat model at 100K trials) |
| `top_class_noise_only` | noise only on the clean top count | everywhere (the other counts are released exactly); the vote-difference score sees a √2 larger μ, so the audit flags it where `sensitivity_one` is flagged |
| `sigma_as_variance` | std √σ | σ > 1: classic ε < 6.85, analytic ε < 6.57 (above, √σ > σ adds more noise) |
| `fixed_noise_seed` | one noise draw for every call | wherever the canary moves the clean votes (white-box: the release is deterministic; the black-box decision only when the fixed draw sits at the argmax boundary) |
| `canary_in_every_partition` | the audited record in all T partitions | T > 1 |
| `noise_scale` | noise std `bug_factor` × σ (also ESA and KSA) | factor < 1: a Gaussian mechanism of μ_theory / factor, so a system at k × its claim is one request away |
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from app.audit.mechanisms.base import Theory, calibrate


@dataclass(frozen=True)
class Bug:
    """A planted bug: what it does, where it breaks DP, and an audit setting inside that region."""

    description: str
    breaks: str
    setting: dict = field(default_factory=dict)
    """Request fields (epsilon, mechanism.*) of an oracle audit where the bug breaks DP."""


_T4 = {"name": "private_voting", "partitions": 4}
BUGS: dict[str, Bug] = {
    "noise_divided_by_t": Bug(
        "noise standard deviation σ/T instead of σ",
        "T > 1",
        {"epsilon": 1.0, "mechanism": {**_T4, "calibration": "classic"}},
    ),
    "sensitivity_one": Bug(
        "σ calibrated for L2 sensitivity 1 instead of √2",
        "ε(√2·μ_theory) > ε: analytic σ at every ε; classic σ above ε ≈ 0.36 (δ = 1e-5)",
        {"epsilon": 2.0, "mechanism": {**_T4, "calibration": "analytic"}},
    ),
    "top_class_noise_only": Bug(
        "noise added only to the top class's vote count",
        "every setting (exact non-top counts); seen by the vote-difference score as a √2 larger μ",
        {"epsilon": 2.0, "mechanism": {**_T4, "calibration": "analytic"}},
    ),
    "sigma_as_variance": Bug(
        "σ used as the variance, so the standard deviation is √σ",
        "σ > 1: classic ε < 6.85, analytic ε < 6.57 (δ = 1e-5, Δ₂ = √2)",
        {"epsilon": 1.0, "mechanism": {**_T4, "calibration": "classic"}},
    ),
    "fixed_noise_seed": Bug(
        "the same noise draw on every call",
        "wherever the canary moves the clean votes (the release is deterministic)",
        {"epsilon": 1.0, "mechanism": {**_T4, "calibration": "classic"}},
    ),
    "noise_scale": Bug(
        "noise standard deviation bug_factor × σ instead of σ",
        "bug_factor < 1: the release is μ_theory / bug_factor-GDP (ε(μ_theory / factor) at δ)",
        {"epsilon": 1.0, "mechanism": {**_T4, "calibration": "analytic", "bug_factor": 0.5}},
    ),
    "canary_in_every_partition": Bug(
        "partitions not disjoint: the audited record is in every partition",
        "T > 1",
        {"epsilon": 1.0, "mechanism": {**_T4, "calibration": "classic"}},
    ),
}

_FIXED_SEED = 12345


SCALES_NOISE = "noise_scale"
"""The one bug every Gaussian mechanism (private voting, ESA, KSA) accepts."""


def factor_for_multiple(theory: Theory, k: float) -> float:
    """The `bug_factor` that makes a mechanism calibrated at ε leak exactly k·ε at δ: its release is then
    (μ_theory / factor)-GDP, so factor = μ_theory / μ(k·ε)."""
    from app.audit.accounting.gdp import mu_for_epsilon

    return theory.mu / mu_for_epsilon(k * theory.epsilon, theory.delta)


def noise_std(theory: Theory, bug: str | None, partitions: int, factor: float | None = None) -> float:
    """The standard deviation the (possibly buggy) release really uses."""
    if bug == "sensitivity_one":
        theory = calibrate(theory.epsilon, theory.delta, 1.0, theory.calibration)
    sigma = theory.sigma
    if sigma is None:
        raise ValueError("a Gaussian release needs its calibrated σ (this theory has none)")
    if bug == SCALES_NOISE:
        return sigma * (factor if factor is not None else 1.0)
    if bug == "noise_divided_by_t":
        return sigma / partitions
    if bug == "sigma_as_variance":
        return float(np.sqrt(sigma))
    return sigma


def vote_noise(clean: np.ndarray, std: float, bug: str | None, rng: np.random.Generator) -> np.ndarray:
    """Gaussian noise N(0, std²) for each of the m calls' K counts, shaped like `clean` (m, K)."""
    if bug == "fixed_noise_seed":
        one_draw = np.random.default_rng(_FIXED_SEED).normal(0.0, std, size=clean.shape[1:])
        return np.broadcast_to(one_draw, clean.shape)
    noise = rng.normal(0.0, std, size=clean.shape)
    if bug == "top_class_noise_only":
        top = np.argmax(clean, axis=1)
        mask = np.zeros(clean.shape, dtype=bool)
        mask[np.arange(clean.shape[0]), top] = True
        noise = np.where(mask, noise, 0.0)
    return noise


def overlapping_blocks(blocks: list[np.ndarray], canary_position: int) -> list[np.ndarray]:
    """`canary_in_every_partition`: every partition also gets the record at `canary_position`."""
    return [b if canary_position in b else np.sort(np.append(b, canary_position)) for b in blocks]
