"""Statistics core speed: 400,000-trial bootstrap (003 Alg. 1) + split threshold search + GDP bound, for
K = 2 and K = 4 labels, against a per-trial Python loop in the same run; and the exact vote audit.

The loop baseline draws trials one at a time (index, noise, argmax, score) on 20,000 trials and is
extrapolated linearly to 400,000; it does no threshold search at all, so the ratio understates the gap.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np

from app.audit.accounting.gaussian import VOTE_SENSITIVITY, classic_sigma
from app.audit.stats.bounds import Counts, gdp_bound_from_counts
from app.audit.stats.exact import exact_vote_audit
from app.audit.stats.thresholds import Split, bound_from_scores
from app.audit.stats.trials import bootstrap_trials, noisy_vote_release

TRIALS = 400_000
LOOP_TRIALS = 20_000
N_LLM = 300


def _clean(k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """n_llm clean vote vectors over T = 10 partitions: C1 sways about one vote toward label 0."""
    p_in = np.full(k, 0.3 / (k - 1))
    p_in[0], p_in[1] = 0.12, 0.7
    p_out = p_in.copy()
    p_out[0], p_out[1] = 0.02, 0.8
    return rng.multinomial(10, p_in / p_in.sum(), N_LLM).astype(float), rng.multinomial(
        10, p_out / p_out.sum(), N_LLM
    ).astype(float)


def _vectorized(clean_in: np.ndarray, clean_out: np.ndarray, sigma: float) -> float:
    start = time.perf_counter()
    trials = bootstrap_trials(clean_in, clean_out, noisy_vote_release(sigma, 0, 1), n_trials=TRIALS, seed=0)
    bound_from_scores(trials.scores_in, trials.scores_out, strategy=Split(seed=0))
    bound_from_scores(trials.decisions_in, trials.decisions_out)
    return time.perf_counter() - start


def _loop(clean_in: np.ndarray, clean_out: np.ndarray, sigma: float) -> float:
    rng = np.random.default_rng(0)
    k = clean_in.shape[1]
    start = time.perf_counter()
    tp = fp = 0
    scores = []
    for _ in range(LOOP_TRIALS):
        for clean, side in ((clean_in, 1), (clean_out, 0)):
            noisy = clean[rng.integers(0, clean.shape[0])] + rng.normal(0.0, sigma, k)
            hit = int(np.argmax(noisy) == 0)
            tp, fp = (tp + hit, fp) if side else (tp, fp + hit)
            scores.append(noisy[0] - noisy[1])
    gdp_bound_from_counts(Counts(tp, LOOP_TRIALS - tp, fp, LOOP_TRIALS - fp))
    return (time.perf_counter() - start) * TRIALS / LOOP_TRIALS


def run() -> Iterator[dict]:
    rng = np.random.default_rng(0)
    sigma = classic_sigma(1.0, 1e-5, VOTE_SENSITIVITY)
    for k in (2, 4):
        clean_in, clean_out = _clean(k, rng)
        ours = min(_vectorized(clean_in, clean_out, sigma) for _ in range(3))
        loop = _loop(clean_in, clean_out, sigma)
        yield {
            "name": f"bootstrap_400k_split_bound_k{k}",
            "value": round(ours, 4),
            "unit": "s",
            "baseline": round(loop, 3),
            "ratio": round(loop / ours, 1),
            "note": f"baseline: per-trial Python loop on {LOOP_TRIALS:,} trials ×{TRIALS // LOOP_TRIALS} "
            "(no threshold search); value: best of 3, 400k C1 + 400k C0 trials, white-box split + black-box",
        }
    for k in (2, 4):
        t = 10
        probs_in = rng.dirichlet(np.ones(k + 1), size=t)[:, :k]
        probs_out = rng.dirichlet(np.ones(k + 1), size=t)[:, :k]
        start = time.perf_counter()
        exact_vote_audit(probs_in, probs_out, sigma=sigma, target=0, other=1, delta=1e-5)
        yield {
            "name": f"exact_vote_audit_T{t}_k{k}",
            "value": round(time.perf_counter() - start, 4),
            "unit": "s",
        }
