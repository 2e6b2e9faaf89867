"""Amin et al.'s sparse vector test (variant "svt") and the data-dependent RDP curve of a step, on small seeded
inputs (no model): Eq. 2 distances, the AboveThreshold runs, their charge, and the step curve."""

from __future__ import annotations

import numpy as np
import pytest

from app.audit.accounting.rdp import symmetric_renyi
from app.audit.icl.synthetic import (
    SparseVectorTest,
    clip_logits,
    step_distributions,
    step_privacy_curve,
    step_privacy_loss,
    svt_distances,
)


def _logprobs(rng: np.random.Generator, rows: int, vocab: int = 9) -> np.ndarray:
    return np.log(rng.dirichlet(np.ones(vocab) * 0.5, size=rows))


def test_distances_are_amin_eq2_and_change_by_at_most_one_over_s():
    rng = np.random.default_rng(0)
    private, public = _logprobs(rng, 5), _logprobs(rng, 1)[0]
    d, neighbours = svt_distances(private, public)
    probs, pub = np.exp(private), np.exp(public)
    assert d == pytest.approx(np.abs(probs.mean(axis=0) - pub).sum())
    for p in range(5):  # D ∖ {p}: the sum without P_p, still divided by s (the expected batch size)
        assert neighbours[p] == pytest.approx(np.abs(np.delete(probs, p, axis=0).sum(axis=0) / 5 - pub).sum())
    assert np.all(np.abs(d - neighbours) <= 1 / 5 + 1e-12)


def _svt(
    threshold: float, noise: float, budget: int, seed: int = 0
) -> tuple[SparseVectorTest, np.random.Generator]:
    rng = np.random.default_rng(seed)
    return SparseVectorTest(
        threshold=threshold, noise=noise, public_temperature=1.0, max_private_tokens=budget, rng=rng
    ), rng


def test_nearly_noiseless_test_is_the_threshold_comparison_and_charges_each_run():
    svt, rng = _svt(threshold=0.5, noise=1e-9, budget=2)
    # d = 0.3 < θ: public (no run ends), then d = 0.7 ≥ θ: private, the run ends with its largest sensitivity
    assert svt.test(0.3, np.array([0.25, 0.3]), rng) is False
    assert svt.test(0.7, np.array([0.69, 0.7]), rng) is True
    assert svt.runs == [pytest.approx(0.05)] and svt.private_tokens == 1 and not svt.exhausted
    assert svt.test(0.9, np.array([0.8, 0.9]), rng) is True  # a new run: its own sensitivity 0.1
    assert svt.runs == [pytest.approx(0.05), pytest.approx(0.1)] and svt.exhausted
    orders = [2.0, 10.0]
    expected = [a * 2 * (0.05**2 + 0.1**2) / 1e-9**2 for a in orders]
    assert svt.rdp_curve(orders) == pytest.approx(expected)


def test_open_run_is_charged_and_public_only_runs_cost_one_run():
    svt, rng = _svt(threshold=2.0, noise=0.01, budget=3, seed=1)
    answers = [svt.test(0.4, np.array([0.38, 0.41]), rng) for _ in range(20)]
    assert not any(answers) and svt.private_tokens == 0 and svt.runs == []
    assert svt.all_runs() == [pytest.approx(0.02)]  # the open run: max |d − d_p| over its 20 queries
    assert svt.rdp_curve([3.0]) == pytest.approx([3.0 * 2 * (0.02 / 0.01) ** 2])


def test_noisy_decisions_follow_the_laplace_test_seeded():
    """With σ > 0 the decision is d + Lap(2σ) ≥ θ + Lap(σ): far above θ nearly always private, far below
    nearly always public, and the same seed gives the same decisions."""

    def decisions(d: float, seed: int) -> list[bool]:
        svt, rng = _svt(threshold=0.5, noise=0.05, budget=10**6, seed=seed)
        return [svt.test(d, np.array([d]), rng) for _ in range(400)]

    assert np.mean(decisions(1.5, 0)) > 0.99 and np.mean(decisions(-0.5, 0)) < 0.01
    near = decisions(0.5, 3)
    assert 0.2 < np.mean(near) < 0.8 and near == decisions(0.5, 3)


def test_step_curve_is_eq7_at_every_order():
    rng = np.random.default_rng(4)
    clipped = clip_logits(rng.normal(scale=6.0, size=(4, 8)), 10.0)
    step = step_distributions(clipped, 1.3)
    orders = [1.5, 2.0, 18.0, 256.0]
    curve = step_privacy_curve(step, orders)
    for i, a in enumerate(orders):
        direct = max(symmetric_renyi(step.log_p, q, a) for q in step.log_neighbours)
        assert curve[i] == pytest.approx(direct, rel=1e-9)
        assert curve[i] == pytest.approx(step_privacy_loss(step, a), rel=1e-9)
    assert np.all(np.diff(curve) >= 0)  # Rényi divergences grow with the order
