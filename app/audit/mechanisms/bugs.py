"""Planted implementation bugs — the mistakes 003 §1 warns about — for the auditor's power.

Each is a `bug` option of the private-voting mechanism. The buggy mechanism still *claims* the
original (ε, δ) (its `Theory` is computed for the correct σ); only its release or partitioning
code changes, so an audit that draws noise through the mechanism's own code must flag it.

- `noise_divided_by_t`: noise std σ/T (the per-partition noise scale mistaken for the aggregate's).
- `sensitivity_one`: σ calibrated for Δ₂ = 1 instead of √2 (one vote moves two counts).
- `top_class_noise_only`: Gaussian noise added only to the clean top class's count.
- `sigma_as_variance`: σ passed where the variance is expected, so the std is √σ.
- `fixed_noise_seed`: the noise generator re-seeded on every call — the same draw every time.
- `canary_in_every_partition`: partitions not disjoint: the audited record lands in all T of them.
"""

from __future__ import annotations

import numpy as np

from app.audit.mechanisms.base import Theory, calibrate

BUGS: dict[str, str] = {
    "noise_divided_by_t": "noise standard deviation σ/T instead of σ",
    "sensitivity_one": "σ calibrated for L2 sensitivity 1 instead of √2",
    "top_class_noise_only": "noise added only to the top class's vote count",
    "sigma_as_variance": "σ used as the variance, so the standard deviation is √σ",
    "fixed_noise_seed": "the same noise draw on every call",
    "canary_in_every_partition": "partitions not disjoint: the audited record is in every partition",
}

_FIXED_SEED = 12345


def noise_std(theory: Theory, bug: str | None, partitions: int) -> float:
    """The standard deviation the (possibly buggy) release really uses."""
    if bug == "noise_divided_by_t":
        return theory.sigma / partitions
    if bug == "sensitivity_one":
        return calibrate(theory.epsilon, theory.delta, 1.0, theory.calibration).sigma
    if bug == "sigma_as_variance":
        return float(np.sqrt(theory.sigma))
    return theory.sigma


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
