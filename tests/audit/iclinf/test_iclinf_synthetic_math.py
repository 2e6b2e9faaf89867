"""001 App. C.1 Alg. 1 (clip-and-aggregate) and the Eq. 7 per-step loss against direct computations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.audit.icl.synthetic import (
    aggregate,
    clip_logits,
    leave_one_out_aggregates,
    log_softmax,
    step_distributions,
    step_privacy_loss,
)


def _direct_renyi(p: list[float], q: list[float], alpha: float) -> float:
    """Def. C.1 by a plain sum: D_α(P‖Q) = 1/(α−1) · log Σ_x Q(x) (P(x)/Q(x))^α."""
    return math.log(sum(qx * (px / qx) ** alpha for px, qx in zip(p, q, strict=True))) / (alpha - 1)


def test_clip_matches_definition_and_ignores_shifts():
    rng = np.random.default_rng(0)
    z = rng.normal(scale=8.0, size=(3, 11))
    c = 2.5
    expected = [[max(-c, zi - max(row) + c) for zi in row] for row in z.tolist()]
    assert clip_logits(z, c) == pytest.approx(np.array(expected))
    # logits and log-probabilities differ by a per-row constant: same clipped values
    assert clip_logits(log_softmax(z), c) == pytest.approx(clip_logits(z, c))
    assert clip_logits(z, c).min() >= -c and clip_logits(z, c).max() == pytest.approx(c)


def test_leave_one_out_equals_aggregate_with_the_prompt_deleted_still_divided_by_s():
    """The neighbour the accounting covers (sensitivity c/s): the sum without p over the batch size s."""
    rng = np.random.default_rng(1)
    clipped = clip_logits(rng.normal(scale=5.0, size=(6, 9)), 4.0)
    loo = leave_one_out_aggregates(clipped)
    for p in range(6):
        assert loo[p] == pytest.approx(aggregate(np.delete(clipped, p, axis=0), batch_size=6), abs=1e-12)


def test_step_distributions_are_softmax_of_the_aggregates():
    rng = np.random.default_rng(2)
    clipped = clip_logits(rng.normal(scale=5.0, size=(4, 7)), 3.0)
    tau = 1.7
    step = step_distributions(clipped, tau)
    zbar = clipped.mean(axis=0) / tau
    assert np.exp(step.log_p) == pytest.approx(np.exp(zbar) / np.exp(zbar).sum())
    assert np.exp(step.log_neighbours).sum(axis=1) == pytest.approx(np.ones(4))


@pytest.mark.parametrize("alpha", [2.0, 5.0, 18.0])
def test_step_loss_is_max_symmetric_renyi_by_direct_sum(alpha):
    rng = np.random.default_rng(3)
    clipped = clip_logits(rng.normal(scale=6.0, size=(5, 8)), 10.0)
    step = step_distributions(clipped, 0.8)
    p = np.exp(step.log_p).tolist()
    expected = max(
        max(_direct_renyi(p, q, alpha), _direct_renyi(q, p, alpha))
        for q in np.exp(step.log_neighbours).tolist()
    )
    assert step_privacy_loss(step, alpha) == pytest.approx(expected, rel=1e-9)


def test_identical_prompts_lose_what_one_prompt_of_s_weighs():
    """Removing one of s identical prompts scales the aggregate by (s − 1)/s (the sum is still divided by s):
    the loss is the divergence of softmax(x) from softmax(⅔x), not 0 as under the s − 1 mean."""
    x = clip_logits(np.arange(6.0), 2.0)
    clipped = np.tile(x, (3, 1))
    expected = max(
        _direct_renyi(np.exp(log_softmax(x)).tolist(), np.exp(log_softmax(2 * x / 3)).tolist(), 4.0),
        _direct_renyi(np.exp(log_softmax(2 * x / 3)).tolist(), np.exp(log_softmax(x)).tolist(), 4.0),
    )
    assert expected > 0
    assert step_privacy_loss(step_distributions(clipped, 1.0), 4.0) == pytest.approx(expected, rel=1e-9)


def test_a_single_prompt_has_no_neighbour():
    with pytest.raises(ValueError, match="at least 2"):
        leave_one_out_aggregates(np.zeros((1, 4)))
