"""Bootstrap auditing (003 Alg. 1): many noisy releases from a few hundred clean LLM statistics.

Lines 2–3 of Alg. 1 collect n_llm clean statistics per context (vote vectors n_llm × K, or mean embeddings
n_llm × d) — the caller does that with the engine. Lines 5–9 are here: every trial resamples one clean row
with replacement (independently for C1 and C0) and passes it through the mechanism's *own* release code,
`release(batch, rng) -> (decision, score)`, which draws the noise. So a bug in the release (wrong σ, noise
added once per batch, …) shows up in the audit. Trials run in chunks so memory stays bounded, and C1 and C0
use independent streams spawned from one seed: the same seed gives the same trials.

`noisy_vote_release` is the documented Gaussian private-voting release (003 §2), the one `exact.py` models.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Release = Callable[[np.ndarray, np.random.Generator], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class TrialScores:
    """Per-trial outputs: black-box decisions (True = "canary present") and white-box scores (higher = in)."""

    decisions_in: np.ndarray
    decisions_out: np.ndarray
    scores_in: np.ndarray
    scores_out: np.ndarray


def bootstrap_trials(
    clean_in: np.ndarray,
    clean_out: np.ndarray,
    release: Release,
    *,
    n_trials: int = 400_000,
    seed: int = 0,
    chunk_size: int = 50_000,
    progress: Callable[[float], None] | None = None,
) -> TrialScores:
    """003 Alg. 1 lines 5–9: n_trials resampled releases per context (C1 = clean_in, C0 = clean_out)."""
    clean_in, clean_out = np.asarray(clean_in), np.asarray(clean_out)
    if clean_in.shape[0] == 0 or clean_out.shape[0] == 0:
        raise ValueError("need at least one clean statistic for each context")
    if clean_in.shape[1:] != clean_out.shape[1:]:
        raise ValueError(f"clean statistics differ in shape: {clean_in.shape[1:]} vs {clean_out.shape[1:]}")
    if n_trials < 1 or chunk_size < 1:
        raise ValueError("n_trials and chunk_size must be ≥ 1")
    rng_in, rng_out = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    decisions = {"in": np.empty(n_trials, dtype=bool), "out": np.empty(n_trials, dtype=bool)}
    scores = {"in": np.empty(n_trials), "out": np.empty(n_trials)}
    done = 0
    while done < n_trials:
        size = min(chunk_size, n_trials - done)
        for side, clean, rng in (("in", clean_in, rng_in), ("out", clean_out, rng_out)):
            batch = clean[rng.integers(0, clean.shape[0], size=size)]
            decision, score = release(batch, rng)
            decisions[side][done : done + size] = decision
            scores[side][done : done + size] = score
        done += size
        if progress is not None:
            progress(done / n_trials)
    return TrialScores(decisions["in"], decisions["out"], scores["in"], scores["out"])


def noisy_vote_release(sigma: float, target: int, other: int) -> Release:
    """Gaussian private voting (003 §2): noisy = votes + N(0, σ²) per label; the black-box decision is
    argmax(noisy) == target, the white-box score is noisy[target] − noisy[other] (003 App. D)."""
    if sigma < 0:
        raise ValueError(f"sigma must be ≥ 0, got {sigma}")

    def release(votes: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        noisy = votes + rng.normal(0.0, sigma, size=votes.shape)
        return noisy.argmax(axis=1) == target, noisy[:, target] - noisy[:, other]

    return release
