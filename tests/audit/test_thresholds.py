"""Scores → bound: threshold strategies, their coverage by simulation, null scores, ROC summaries."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from app.audit.stats.thresholds import (
    Bonferroni,
    InSample,
    Split,
    auc,
    best_balanced_accuracy,
    bound_from_scores,
    strategy_from_name,
    tpr_at_fpr,
)

REPETITIONS = 1000


def _gaussian_pair(rng: np.random.Generator, mu: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    return rng.normal(mu, 1.0, n), rng.normal(0.0, 1.0, n)


@pytest.mark.parametrize("strategy", [Split(), Bonferroni()], ids=["split", "bonferroni"])
def test_coverage_of_the_95_percent_lower_bound(strategy: Split | Bonferroni) -> None:
    """For N(μ,1) vs N(0,1) — exactly μ-GDP — the 95 % bound may exceed μ in at most 5 % of repetitions."""
    mu_true, rng = 1.0, np.random.default_rng(2024)
    over = 0
    for rep in range(REPETITIONS):
        s_in, s_out = _gaussian_pair(rng, mu_true, 500)
        if isinstance(strategy, Split):
            strategy = Split(seed=rep)
        over += bound_from_scores(s_in, s_out, strategy=strategy).mu_lower > mu_true
    slack = 3 * np.sqrt(REPETITIONS * 0.05 * 0.95)
    assert over <= 0.05 * REPETITIONS + slack


@pytest.mark.parametrize("strategy", [Split(), Bonferroni()], ids=["split", "bonferroni"])
def test_null_scores_give_zero_epsilon(strategy: Split | Bonferroni) -> None:
    rng = np.random.default_rng(7)
    zero = 0
    for rep in range(REPETITIONS):
        s_in, s_out = _gaussian_pair(rng, 0.0, 500)
        if isinstance(strategy, Split):
            strategy = Split(seed=rep)
        zero += bound_from_scores(s_in, s_out, strategy=strategy).epsilon_empirical == 0.0
    assert zero >= 0.95 * REPETITIONS


def test_in_sample_is_labelled_biased_and_at_least_the_split_bound() -> None:
    rng = np.random.default_rng(1)
    s_in, s_out = _gaussian_pair(rng, 1.5, 4000)
    biased = bound_from_scores(s_in, s_out, strategy=InSample())
    honest = bound_from_scores(s_in, s_out, strategy=Split(seed=3))
    assert biased.biased and biased.as_dict()["biased"] is True and not honest.biased
    assert biased.mu_lower >= honest.mu_lower  # more data and the optimistic threshold choice
    assert 1.1 < biased.mu_lower < 1.5 and 0.9 < honest.mu_lower < 1.5
    # The in-sample threshold is the argmax of μ_lower over every C1 score (checked exhaustively here).
    from app.audit.stats.bounds import gdp_mu_lower

    candidates = np.unique(s_in)
    tp = (s_in[None, :] >= candidates[:, None]).sum(axis=1)
    fp = (s_out[None, :] >= candidates[:, None]).sum(axis=1)
    assert biased.mu_lower == pytest.approx(gdp_mu_lower(tp, 4000, fp, 4000, 0.025).max(), rel=1e-12)


def test_split_is_deterministic_given_its_seed() -> None:
    rng = np.random.default_rng(5)
    s_in, s_out = _gaussian_pair(rng, 1.0, 3000)
    a = bound_from_scores(s_in, s_out, strategy=Split(seed=11))
    assert a == bound_from_scores(s_in, s_out, strategy=Split(seed=11))
    assert a.counts.n_in == 1500 and a.counts.n_out == 1500
    assert a.threshold_strategy == "split"
    json.dumps(a.as_dict())


def test_binary_decisions_use_the_one_threshold_on_all_data() -> None:
    decisions_in = np.array([True] * 70 + [False] * 30)
    decisions_out = np.array([True] * 20 + [False] * 80)
    b = bound_from_scores(decisions_in, decisions_out)
    assert (b.counts.tp, b.counts.fn, b.counts.fp, b.counts.tn) == (70, 30, 20, 80)
    assert b.threshold == 1.0 and b.threshold_strategy == "decision"
    assert b.auc == pytest.approx((0.7 + 0.8) / 2)


def test_bonferroni_bound_is_corrected_but_reports_the_requested_confidence() -> None:
    rng = np.random.default_rng(9)
    s_in, s_out = _gaussian_pair(rng, 2.0, 2000)
    b = bound_from_scores(s_in, s_out, strategy=Bonferroni(max_thresholds=50))
    assert b.confidence == 0.95 and b.threshold_strategy == "bonferroni"
    from app.audit.stats.bounds import gdp_bound_from_counts

    assert b.mu_lower < gdp_bound_from_counts(b.counts).mu_lower  # stricter than one uncorrected bound


def test_roc_summaries_against_brute_force() -> None:
    rng = np.random.default_rng(3)
    s_in = rng.integers(0, 20, 300).astype(float)  # ties on purpose
    s_out = rng.integers(0, 15, 200).astype(float)
    greater = (s_in[:, None] > s_out[None, :]).mean()
    equal = (s_in[:, None] == s_out[None, :]).mean()
    assert auc(s_in, s_out) == pytest.approx(greater + equal / 2)
    thresholds = np.unique(np.concatenate([s_in, s_out, [np.inf]]))
    tpr = (s_in[None, :] >= thresholds[:, None]).mean(axis=1)
    fpr = (s_out[None, :] >= thresholds[:, None]).mean(axis=1)
    assert tpr_at_fpr(s_in, s_out, 0.1) == pytest.approx(tpr[fpr <= 0.1].max())
    assert best_balanced_accuracy(s_in, s_out) == pytest.approx(((tpr + 1 - fpr) / 2).max())
    gaussian_auc = auc(*_gaussian_pair(np.random.default_rng(0), 1.0, 20_000))
    assert gaussian_auc == pytest.approx(stats.norm.cdf(1 / np.sqrt(2)), abs=0.01)


def test_strategy_names_and_bad_input() -> None:
    assert strategy_from_name("split", seed=4) == Split(seed=4)
    assert strategy_from_name("in_sample") == InSample()
    assert strategy_from_name("bonferroni") == Bonferroni()
    with pytest.raises(ValueError, match="in_sample, split, bonferroni"):
        strategy_from_name("best")
    with pytest.raises(ValueError, match="scores_in"):
        bound_from_scores(np.array([]), np.array([1.0]))
    with pytest.raises(ValueError, match="NaN"):
        bound_from_scores(np.array([np.nan, 1.0]), np.array([1.0, 2.0]))
    with pytest.raises(ValueError):
        Split(fraction=1.0)
