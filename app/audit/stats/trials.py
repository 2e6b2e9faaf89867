"""Membership trials: many private releases per context, through the mechanism's own release code.

One chunk loop (`run_trials`) serves both sampling estimators; they differ only in where a trial's clean
statistic comes from:

- `bootstrap_trials` (003 Alg. 1 lines 5–9): resample one row of the clean pool with replacement
  (collected once, n_llm rows per context; lines 2–3);
- `direct`: a fresh clean statistic per trial from the engine's answer distributions (kinds/mia.py).

Then `release(batch, rng) -> (decision, score)` draws the noise, so a bug in the release (wrong σ, noise
added once per batch, …) shows up in the audit. C1 and C0 trials use their own noise streams (the
audit's seed tree, app/audit/seeds.py); chunks keep memory bounded; the same streams give the same trials.

Soundness with a pool (docs/results/soundness.md): when row i of the C1 pool and row i of the C0 pool
share every non-canary partition's output (common random numbers), C1's trial law is the mixture
(1/n)Σᵢ M(Vᵢ¹) and C0's is (1/n)Σᵢ M(Vᵢ⁰) with each pair (Vᵢ¹, Vᵢ⁰) neighbouring; by joint convexity of the
hockey-stick divergence the pair of mixtures is as private as the mechanism, so Clopper-Pearson on the
trials covers the pool too.

`noisy_vote_release` is the documented Gaussian private-voting release (003 §2), the one `exact.py` models.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from app.audit.budget import BudgetExhausted

Release = Callable[[np.ndarray, np.random.Generator], tuple[np.ndarray, np.ndarray]]
Draw = Callable[[int], tuple[np.ndarray, np.ndarray]]
"""`draw(size)` → `size` clean statistics (rows) of C1 and of C0. A budget stop inside a draw raises
BudgetExhausted with `partial` = the (C1, C0) rows of the trials it finished, both sides alike."""

MEMORY_FLOATS = 4_000_000  # clean-statistic floats per chunk (~32 MB per array)
FIRST_CHUNK = 1_000
MAX_CHUNK = 50_000


@dataclass(frozen=True)
class TrialScores:
    """Per-trial outputs: black-box decisions (True = "canary present") and white-box scores (higher = in)."""

    decisions_in: np.ndarray
    decisions_out: np.ndarray
    scores_in: np.ndarray
    scores_out: np.ndarray
    stopped: BudgetExhausted | None = None  # run_trials stopped by a budget after `done` trials

    @property
    def done(self) -> int:
        return int(self.decisions_in.size)


def run_trials(
    draw: Draw,
    release: Release,
    *,
    n_trials: int,
    rng_in: np.random.Generator,
    rng_out: np.random.Generator,
    max_chunk: int = MAX_CHUNK,
    progress: Callable[[float], None] | None = None,
) -> TrialScores:
    """`n_trials` releases per context in chunks: each chunk draws both sides' clean statistics, then each
    side releases its own with its own noise stream.

    The first chunk has at most `FIRST_CHUNK` trials; later ones hold ≈ `MEMORY_FLOATS` clean floats
    (at least 1,000, at most `max_chunk`). `progress(fraction)` is called after every chunk. A budget stop
    (app/audit/budget.py) keeps the trials finished, both sides alike — a stopped draw's `partial` pairs
    too — and is returned in `stopped`; one before any trial is raised.
    """
    if n_trials < 1 or max_chunk < 1:
        raise ValueError("n_trials and max_chunk must be ≥ 1")
    decisions = {"in": np.empty(n_trials, dtype=bool), "out": np.empty(n_trials, dtype=bool)}
    scores = {"in": np.empty(n_trials), "out": np.empty(n_trials)}
    chunk, done = min(FIRST_CHUNK, max_chunk), 0
    stop: BudgetExhausted | None = None

    def keep(clean: tuple[np.ndarray, np.ndarray]) -> int:
        size = len(clean[0])
        for side, rows, rng in (("in", clean[0], rng_in), ("out", clean[1], rng_out)):
            if size:
                decision, score = release(rows, rng)
                decisions[side][done : done + size] = decision
                scores[side][done : done + size] = score
        return size

    try:
        while done < n_trials:
            size = min(chunk, n_trials - done)
            try:
                clean = draw(size)
            except BudgetExhausted as exc:
                if exc.partial is not None:
                    done += keep(exc.partial)
                raise
            done += keep(clean)
            width = max(1, int(np.prod(clean[0].shape[1:])))
            chunk = min(max_chunk, max(FIRST_CHUNK, MEMORY_FLOATS // width))
            if progress is not None:
                progress(done / n_trials)
    except BudgetExhausted as exc:  # keep the finished trials, both sides alike (app/audit/budget.py)
        if done == 0:
            raise
        stop = exc if done < n_trials else None  # the report after the last trial: nothing left undone
    cut = {k: v[:done] for k, v in decisions.items()}, {k: v[:done] for k, v in scores.items()}
    return TrialScores(cut[0]["in"], cut[0]["out"], cut[1]["in"], cut[1]["out"], stopped=stop)


def resample(clean: np.ndarray, rng: np.random.Generator) -> Callable[[int], np.ndarray]:
    """Rows of `clean` picked uniformly with replacement from `rng` (003 Alg. 1 line 6)."""
    clean = np.asarray(clean)
    return lambda size: clean[rng.integers(0, clean.shape[0], size=size)]


def bootstrap_trials(
    clean_in: np.ndarray,
    clean_out: np.ndarray,
    release: Release,
    *,
    n_trials: int = 400_000,
    seed: int | np.random.SeedSequence = 0,
    rngs: tuple[np.random.Generator, np.random.Generator] | None = None,
    chunk_size: int = MAX_CHUNK,
    progress: Callable[[float], None] | None = None,
) -> TrialScores:
    """003 Alg. 1 lines 5–9: n_trials resampled releases per context (C1 = clean_in, C0 = clean_out).

    Noise streams: `rngs` (C1, C0) when given (an audit's seed tree), else two children of `seed`.
    """
    clean_in, clean_out = np.asarray(clean_in), np.asarray(clean_out)
    if clean_in.shape[0] == 0 or clean_out.shape[0] == 0:
        raise ValueError("need at least one clean statistic for each context")
    if clean_in.shape[1:] != clean_out.shape[1:]:
        raise ValueError(f"clean statistics differ in shape: {clean_in.shape[1:]} vs {clean_out.shape[1:]}")
    if chunk_size < 1:
        raise ValueError("n_trials and chunk_size must be ≥ 1")
    if rngs is None:
        sequence = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
        first, second = sequence.spawn(2)
        rngs = (np.random.default_rng(first), np.random.default_rng(second))
    pick_in, pick_out = resample(clean_in, rngs[0]), resample(clean_out, rngs[1])
    return run_trials(
        lambda size: (pick_in(size), pick_out(size)),
        release,
        n_trials=n_trials,
        rng_in=rngs[0],
        rng_out=rngs[1],
        max_chunk=chunk_size,
        progress=progress,
    )


def noisy_vote_release(sigma: float, target: int, other: int) -> Release:
    """Gaussian private voting (003 §2): noisy = votes + N(0, σ²) per label; the black-box decision is
    argmax(noisy) == target, the white-box score is noisy[target] − noisy[other] (003 App. D)."""
    if sigma < 0:
        raise ValueError(f"sigma must be ≥ 0, got {sigma}")

    def release(votes: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        noisy = votes + rng.normal(0.0, sigma, size=votes.shape)
        return noisy.argmax(axis=1) == target, noisy[:, target] - noisy[:, other]

    return release
