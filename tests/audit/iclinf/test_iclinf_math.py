"""Eq. 4 of 001 against a brute-force loop, and App. B calibration against its definition."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from app.audit.icl.iclinf import (
    calibrate,
    content_free_distribution,
    leave_one_out_losses,
    max_abs_log_ratio,
    renormalize,
    summarize,
)


def _toy_distribution(exemplars: tuple[int, ...], query: int, n_outputs: int) -> list[float]:
    """A fixed, order-dependent map (exemplars, query) → probabilities over n_outputs (pure Python)."""
    scores = []
    for y in range(n_outputs):
        s = math.sin(1.3 * query + 0.7 * y)
        for pos, e in enumerate(exemplars):
            s += math.cos(0.9 * e * (y + 1) + 0.31 * pos) / (1 + pos)
        scores.append(math.exp(s))
    total = sum(scores)
    return [v / total for v in scores]


def test_eq4_matches_brute_force_on_a_tiny_case():
    rng = np.random.default_rng(3)
    n_train, k, m, n_outputs = 7, 3, 5, 4
    draws = [tuple(int(i) for i in rng.choice(n_train, size=k, replace=False)) for _ in range(m)]

    # Brute force: literal Eq. 4, loops over queries, removed exemplars and outputs.
    total = 0.0
    for j, S in enumerate(draws):
        worst = 0.0
        p_full = _toy_distribution(S, j, n_outputs)
        for i in range(k):
            p_removed = _toy_distribution(S[:i] + S[i + 1 :], j, n_outputs)
            for y in range(n_outputs):
                worst = max(worst, abs(math.log(p_full[y]) - math.log(p_removed[y])))
        total += worst
    brute = total / m

    losses = np.array(
        [
            leave_one_out_losses(
                np.log(_toy_distribution(S, j, n_outputs)),
                np.log([_toy_distribution(S[:i] + S[i + 1 :], j, n_outputs) for i in range(k)]),
            )
            for j, S in enumerate(draws)
        ]
    )
    summary = summarize(losses)
    assert summary.iclinf == pytest.approx(brute, rel=1e-12)
    assert len(summary.per_position) == k
    assert summary.per_query == pytest.approx(losses.max(axis=1))
    assert summary.iclinf_std == pytest.approx(np.std(losses.max(axis=1)))
    # per-position means are taken before the max, so each is at most the mean of maxima
    assert max(summary.per_position) <= summary.iclinf + 1e-12


def test_identical_distributions_have_zero_loss():
    logp = np.log([0.2, 0.3, 0.5])
    assert leave_one_out_losses(logp, np.stack([logp, logp])).tolist() == [0.0, 0.0]


def test_renormalize_over_label_subset():
    raw = np.log([0.1, 0.2, 0.05])  # label sequence logprobs; the rest of the mass is elsewhere
    assert np.exp(renormalize(raw)) == pytest.approx(np.array([0.1, 0.2, 0.05]) / 0.35)


def test_calibration_is_normalized_division_by_content_free():
    p = np.array([0.6, 0.3, 0.1])
    p_cf = np.array([0.7, 0.2, 0.1])
    eps = 1e-3
    expected = (p / (p_cf + eps)) / (p / (p_cf + eps)).sum()
    assert np.exp(calibrate(np.log(p), np.log(p_cf), eps)) == pytest.approx(expected)


def test_content_free_distribution_averages_probabilities():
    # Zhao et al. 2021: p_cf = normalize(mean over the content-free inputs of p(· | input))
    per_input = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.4, 0.4, 0.2]])
    expected = per_input.mean(axis=0) / per_input.mean(axis=0).sum()
    assert np.exp(content_free_distribution(np.log(per_input))) == pytest.approx(expected)
    # one input (001 App. B's blank content) is that input's distribution; rows of k + 1 sets stay apart
    rows = np.log(np.array([[[0.6, 0.4], [0.3, 0.7]]]))
    assert np.exp(content_free_distribution(rows)) == pytest.approx(np.exp(rows[0]))
    assert np.exp(content_free_distribution(np.array([[0.0, -np.inf], np.log([0.5, 0.5])]))) == pytest.approx(
        [0.75, 0.25]
    )


def test_impossible_outputs_under_both_count_as_zero():
    a = np.array([np.log(0.5), np.log(0.5), -np.inf])
    b = np.array([np.log(0.25), np.log(0.75), -np.inf])
    assert max_abs_log_ratio(a, b) == pytest.approx(math.log(2))
    assert max_abs_log_ratio(a, np.array([np.log(0.5), -np.inf, 0.0])) == math.inf


@pytest.mark.parametrize("shape", [(0, 3), (3,), (2, 0)])
def test_summarize_rejects_bad_shapes(shape):
    with pytest.raises(ValueError):
        summarize(np.zeros(shape))


def test_per_position_is_the_column_mean():
    losses = np.array(list(itertools.product([0.0, 1.0], repeat=3)), dtype=float)
    assert summarize(losses).per_position == pytest.approx((0.5, 0.5, 0.5))
