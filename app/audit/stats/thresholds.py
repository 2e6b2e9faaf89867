"""Scores → a privacy lower bound: choosing the decision threshold honestly, plus ROC summaries.

A score is "higher = canary present"; the test at threshold t says "in" when score ≥ t. Choosing t on the
data the bound is computed from makes the bound optimistic, so three strategies:

- `InSample()`: t maximizes μ_lower on all the data (003's choice). Biased upward; labelled so.
- `Split(fraction, seed)` (default): t is chosen on a seeded `fraction` of each side; the bound is
  computed on the held-out rest, so it keeps its stated confidence. The choice maximizes μ_lower on the
  selection part at a 100× smaller α (`SELECTION_PENALTY`): a tail threshold resting on a handful of
  false positives must earn its place, otherwise the winner's curse picks a lucky tail whose held-out
  FPR is several times larger (seen: ε_emp/ε fell to 0.5 on one seed in five at μ = 0.27). Any rule
  that looks only at the selection part keeps the bound valid; this one is just less often unlucky.
- `Bonferroni(max_thresholds)`: up to m candidate thresholds at geometrically spaced ranks of the C0 scores
  (j-th largest, j = 1 … n_out); every one-sided bound is taken at (1−γ)/(2m), so the best candidate's
  bound holds jointly with confidence γ. The candidates depend on the C0 scores only: the C1 counts stay
  binomial given them, and the C0 rate at an order statistic is stochastically smaller than the
  Clopper-Pearson bound assumes, so the union bound is valid.

Binary decisions (every score 0 or 1, the black-box case) have one meaningful threshold, so no choice is
made: the bound uses all the data at t = 1 and is reported with strategy "decision".

Every strategy chooses t for one bound, `assumption`: "gdp" maximizes μ_lower, "none" the assumption-free
ε_af at δ (bounds.py); both bounds are reported at the chosen t.

Threshold search is vectorized: each side is sorted once and counts at all candidate thresholds come from
`searchsorted`. The best threshold is screened with Wilson score bounds (closed form), and the exact
Clopper-Pearson objective is computed for the 64 best screened candidates.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from scipy import special

from app.audit.stats.bounds import (
    Assumption,
    Counts,
    PrivacyBound,
    assumption_free_epsilon,
    gdp_bound_from_counts,
    mu_from_rates,
    rate_bounds,
)

_SCREENED = 64
SELECTION_PENALTY = 100.0


@dataclass(frozen=True)
class InSample:
    """Threshold chosen on the same data as the bound (003's practice; the result is biased upward)."""

    name: ClassVar[str] = "in_sample"


@dataclass(frozen=True)
class Split:
    """Choose the threshold on a seeded `fraction` of each side, bound on the rest (unbiased; the default)."""

    fraction: float = 0.5
    seed: int = 0
    name: ClassVar[str] = "split"

    def __post_init__(self) -> None:
        if not 0 < self.fraction < 1:
            raise ValueError(f"split fraction must be in (0, 1), got {self.fraction}")


@dataclass(frozen=True)
class Bonferroni:
    """Union bound over at most `max_thresholds` candidates fixed by the C0 scores (unbiased)."""

    max_thresholds: int = 100
    name: ClassVar[str] = "bonferroni"

    def __post_init__(self) -> None:
        if self.max_thresholds < 1:
            raise ValueError(f"max_thresholds must be ≥ 1, got {self.max_thresholds}")


ThresholdStrategy = InSample | Split | Bonferroni
STRATEGY_NAMES = ("in_sample", "split", "bonferroni")


def strategy_from_name(name: str, *, seed: int = 0) -> ThresholdStrategy:
    """ "in_sample" | "split" | "bonferroni" → the strategy with its defaults (`seed` seeds the split)."""
    if name == "in_sample":
        return InSample()
    if name == "split":
        return Split(seed=seed)
    if name == "bonferroni":
        return Bonferroni()
    raise ValueError(f"unknown threshold strategy {name!r}; choose one of {', '.join(STRATEGY_NAMES)}")


def bound_from_scores(
    scores_in: np.ndarray,
    scores_out: np.ndarray,
    *,
    strategy: ThresholdStrategy = Split(),
    confidence: float = 0.95,
    delta: float = 1e-5,
    assumption: Assumption = "gdp",
) -> PrivacyBound:
    """Both lower bounds (GDP, 003 §2; assumption-free) of the test "score ≥ t", with t chosen by `strategy`
    to maximize the bound named by `assumption` (the one the verdict will use)."""
    s_in, s_out = _as_scores(scores_in, "scores_in"), _as_scores(scores_out, "scores_out")
    common: dict[str, Any] = {"confidence": confidence, "delta": delta, "assumption": assumption}
    if _is_binary(s_in) and _is_binary(s_out):
        tp, fp = int(s_in.sum()), int(s_out.sum())
        counts = Counts(tp=tp, fn=s_in.size - tp, fp=fp, tn=s_out.size - fp)
        area = (1 + tp / s_in.size - fp / s_out.size) / 2  # AUC of a single decision
        return gdp_bound_from_counts(counts, threshold=1.0, threshold_strategy="decision", auc=area, **common)
    sorted_in, sorted_out = np.sort(s_in), np.sort(s_out)
    area = _sorted_auc(sorted_in, sorted_out)
    alpha = (1 - confidence) / 2
    objective = _Objective(assumption, delta)
    if isinstance(strategy, InSample):
        t = _best_threshold(sorted_in, sorted_out, alpha, objective)
        counts = _counts_at(sorted_in, sorted_out, t)
    elif isinstance(strategy, Split):
        if min(s_in.size, s_out.size) < 2:
            raise ValueError("the split strategy needs at least two scores on each side")
        rng = np.random.default_rng(strategy.seed)
        pick_in, rest_in = _split_sorted(sorted_in, strategy.fraction, rng)
        pick_out, rest_out = _split_sorted(sorted_out, strategy.fraction, rng)
        t = _best_threshold(pick_in, pick_out, alpha / SELECTION_PENALTY, objective)
        counts = _counts_at(rest_in, rest_out, t)
    elif isinstance(strategy, Bonferroni):
        candidates = _bonferroni_candidates(sorted_out, strategy.max_thresholds)
        tps, fps = _counts_at_many(sorted_in, sorted_out, candidates)
        value = objective(*rate_bounds(tps, s_in.size, fps, s_out.size, alpha / candidates.size))
        t = float(candidates[int(np.argmax(value))])
        counts = _counts_at(sorted_in, sorted_out, t)
        corrected = common | {"confidence": 1 - (1 - confidence) / candidates.size}
        bound = gdp_bound_from_counts(
            counts, threshold=t, threshold_strategy=strategy.name, auc=area, **corrected
        )
        return dataclasses.replace(bound, confidence=confidence)
    else:
        raise TypeError(f"not a threshold strategy: {strategy!r}")
    return gdp_bound_from_counts(counts, threshold=t, threshold_strategy=strategy.name, auc=area, **common)


def auc(scores_in: np.ndarray, scores_out: np.ndarray) -> float:
    """Area under the ROC curve = P(S_in > S_out) + ½ P(S_in = S_out) (Mann-Whitney), by sorted search."""
    s_in, s_out = _as_scores(scores_in, "scores_in"), _as_scores(scores_out, "scores_out")
    return _sorted_auc(np.sort(s_in), np.sort(s_out))


def _sorted_auc(sorted_in: np.ndarray, sorted_out: np.ndarray) -> float:
    # Sorted queries keep searchsorted cache-friendly (several times faster than unsorted ones).
    below = np.searchsorted(sorted_out, sorted_in, side="left").sum(dtype=np.float64)
    at_or_below = np.searchsorted(sorted_out, sorted_in, side="right").sum(dtype=np.float64)
    return float((below + at_or_below) / 2 / (sorted_in.size * sorted_out.size))


def tpr_at_fpr(scores_in: np.ndarray, scores_out: np.ndarray, fpr: float) -> float:
    """The largest empirical TPR of a threshold whose empirical FPR is ≤ `fpr`."""
    if not 0 <= fpr <= 1:
        raise ValueError(f"fpr must be in [0, 1], got {fpr}")
    sorted_in = np.sort(_as_scores(scores_in, "scores_in"))
    sorted_out = np.sort(_as_scores(scores_out, "scores_out"))
    candidates = np.unique(sorted_in)
    tp, fp = _counts_at_many(sorted_in, sorted_out, candidates)
    ok = fp <= fpr * sorted_out.size
    return float(tp[ok].max() / sorted_in.size) if ok.any() else 0.0


def best_balanced_accuracy(scores_in: np.ndarray, scores_out: np.ndarray) -> float:
    """max over t of (TPR + TNR)/2 — the in-sample accuracy of the best threshold with balanced classes."""
    sorted_in = np.sort(_as_scores(scores_in, "scores_in"))
    sorted_out = np.sort(_as_scores(scores_out, "scores_out"))
    tp, fp = _counts_at_many(sorted_in, sorted_out, np.unique(sorted_in))
    balanced = (tp / sorted_in.size + 1 - fp / sorted_out.size) / 2
    return float(max(0.5, balanced.max()))


@dataclass(frozen=True)
class _Objective:
    """What threshold selection maximizes, from (FNR upper, FPR upper): μ_lower ("gdp") or ε_af at δ ("none")."""

    assumption: Assumption
    delta: float

    def __call__(self, fnr_upper: np.ndarray, fpr_upper: np.ndarray) -> np.ndarray:
        if self.assumption == "gdp":
            return mu_from_rates(fnr_upper, fpr_upper)
        if self.assumption == "none":
            return assumption_free_epsilon(fnr_upper, fpr_upper, self.delta)
        raise ValueError(f"assumption must be 'gdp' or 'none', got {self.assumption!r}")


def _best_threshold(
    sorted_in: np.ndarray, sorted_out: np.ndarray, alpha: float, objective: _Objective
) -> float:
    """The C1 score t maximizing the objective (the optimum always sits at a C1 score: raising t to the next
    one keeps TP and can only lower FP). Wilson bounds screen all candidates; exact bounds pick the best."""
    candidates = np.unique(sorted_in)
    tp, fp = _counts_at_many(sorted_in, sorted_out, candidates)
    if candidates.size > _SCREENED:
        z = special.ndtri(1 - alpha)
        approx = objective(
            _wilson_upper(sorted_in.size - tp, sorted_in.size, z), _wilson_upper(fp, sorted_out.size, z)
        )
        keep = np.sort(np.argpartition(-approx, _SCREENED)[:_SCREENED])
        candidates, tp, fp = candidates[keep], tp[keep], fp[keep]
    value = objective(*rate_bounds(tp, sorted_in.size, fp, sorted_out.size, alpha))
    return float(candidates[int(np.argmax(value))])


def _wilson_upper(k: np.ndarray, n: int, z: float) -> np.ndarray:
    """Wilson score upper bound on a binomial rate (used only to screen thresholds)."""
    p = k / n
    centre = p + z * z / (2 * n)
    spread = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return np.clip((centre + spread) / (1 + z * z / n), 1e-300, 1.0)


def _bonferroni_ranks(n_out: int, m: int) -> np.ndarray:
    return np.unique(np.rint(np.geomspace(1, n_out, num=min(m, n_out))).astype(np.int64))


def bonferroni_tests(n_out: int, m: int = Bonferroni.max_thresholds) -> int:
    """How many candidates the Bonferroni strategy corrects over with n_out C0 scores (at most: tied
    scores can merge two), so a power model at α / this is never more optimistic than the audit."""
    return int(_bonferroni_ranks(n_out, m).size)


def _bonferroni_candidates(sorted_out: np.ndarray, m: int) -> np.ndarray:
    return np.unique(sorted_out[sorted_out.size - _bonferroni_ranks(sorted_out.size, m)])


def _counts_at_many(
    sorted_in: np.ndarray, sorted_out: np.ndarray, thresholds: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    tp = sorted_in.size - np.searchsorted(sorted_in, thresholds, side="left")
    fp = sorted_out.size - np.searchsorted(sorted_out, thresholds, side="left")
    return tp, fp


def _counts_at(sorted_in: np.ndarray, sorted_out: np.ndarray, threshold: float) -> Counts:
    tp, fp = _counts_at_many(sorted_in, sorted_out, np.array([threshold]))
    return Counts(
        tp=int(tp[0]), fn=int(sorted_in.size - tp[0]), fp=int(fp[0]), tn=int(sorted_out.size - fp[0])
    )


def _split_sorted(
    sorted_scores: np.ndarray, fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """A seeded random split into (selection, rest) of sizes round(fraction·n) and the remainder.

    The membership mask is drawn independently of the values, so this is the same random split as
    shuffling first; applied to sorted scores, both parts come out sorted with no further sort.
    """
    n = sorted_scores.size
    k = min(max(round(fraction * n), 1), n - 1)
    pick = np.zeros(n, dtype=bool)
    pick[rng.permutation(n)[:k]] = True
    return sorted_scores[pick], sorted_scores[~pick]


def _is_binary(scores: np.ndarray) -> bool:
    return bool(np.all((scores == 0) | (scores == 1)))


def _as_scores(scores: np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(scores, dtype=np.float64)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array of scores")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return array
