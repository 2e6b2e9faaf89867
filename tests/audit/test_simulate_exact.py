"""Bootstrap driver (003 Alg. 1) and the exact vote audit; the bootstrap converges to the exact value."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import integrate, special, stats

from app.audit.accounting.gaussian import VOTE_SENSITIVITY, classic_sigma, gaussian_mu
from app.audit.stats.bounds import Counts, gdp_bound_from_counts
from app.audit.stats.exact import exact_vote_audit, log_prob_argmax, vote_distribution
from app.audit.stats.trials import bootstrap_trials, noisy_vote_release

SIGMA = classic_sigma(1.0, 1e-5, VOTE_SENSITIVITY)  # 003's private voting at ε = 1


def _deterministic(votes: list[int], partitions: int) -> np.ndarray:
    """(T, K) label probabilities where partition t votes for a fixed label."""
    probs = np.zeros((partitions, len(votes)))
    row = 0
    for label, count in enumerate(votes):
        probs[row : row + count, label] = 1.0
        row += count
    return probs


def _sample_votes(probs: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """n clean vote vectors: each partition draws a label (or an invalid vote) from its row."""
    t, k = probs.shape
    full = np.concatenate([probs, 1 - probs.sum(axis=1, keepdims=True)], axis=1)
    draws = (rng.random((n, t, 1)) > np.cumsum(full, axis=1)[None]).sum(axis=2)
    return np.stack([(draws == j).sum(axis=1) for j in range(k)], axis=1).astype(float)


def test_bootstrap_is_deterministic_and_seeded() -> None:
    clean_in, clean_out = np.array([[1.0, 9.0]] * 5), np.array([[0.0, 10.0]] * 5)
    release = noisy_vote_release(SIGMA, 0, 1)
    a = bootstrap_trials(clean_in, clean_out, release, n_trials=1000, seed=3, chunk_size=300)
    b = bootstrap_trials(clean_in, clean_out, release, n_trials=1000, seed=3, chunk_size=300)
    c = bootstrap_trials(clean_in, clean_out, release, n_trials=1000, seed=4, chunk_size=300)
    assert np.array_equal(a.scores_in, b.scores_in) and np.array_equal(a.decisions_out, b.decisions_out)
    assert not np.array_equal(a.scores_in, c.scores_in)
    assert a.decisions_in.dtype == bool and a.scores_in.shape == (1000,)
    seen: list[float] = []
    bootstrap_trials(clean_in, clean_out, release, n_trials=1000, chunk_size=300, progress=seen.append)
    assert seen == [0.3, 0.6, 0.9, 1.0]


def test_bootstrap_resamples_the_clean_rows() -> None:
    # C1 rows are [1, 9] or [3, 7] with equal frequency; with almost no noise the score is 2·v0 − 10.
    clean_in = np.array([[1.0, 9.0], [3.0, 7.0]])
    trials = bootstrap_trials(clean_in, clean_in, noisy_vote_release(1e-9, 0, 1), n_trials=20_000, seed=1)
    values, counts = np.unique(np.round(trials.scores_in), return_counts=True)
    assert values.tolist() == [-8.0, -4.0]
    assert stats.binomtest(int(counts[0]), 20_000).pvalue > 1e-4


def test_bootstrap_sees_a_bug_in_the_release_code() -> None:
    """Noise divided by T (a real DP-ICL bug) makes the audit exceed the mechanism's own μ."""
    clean_in, clean_out = np.array([[1.0, 9.0]]), np.array([[0.0, 10.0]])

    def buggy(votes: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        return noisy_vote_release(SIGMA / 10, 0, 1)(votes, rng)

    mu_theory = gaussian_mu(VOTE_SENSITIVITY, SIGMA)
    honest = bootstrap_trials(clean_in, clean_out, noisy_vote_release(SIGMA, 0, 1), n_trials=50_000, seed=2)
    broken = bootstrap_trials(clean_in, clean_out, buggy, n_trials=50_000, seed=2)
    from app.audit.stats.thresholds import bound_from_scores

    assert bound_from_scores(honest.scores_in, honest.scores_out).mu_lower <= mu_theory
    assert bound_from_scores(broken.scores_in, broken.scores_out).mu_lower > 5 * mu_theory


def test_vote_distribution_against_enumeration() -> None:
    probs = np.array([[0.5, 0.3], [0.1, 0.8], [0.25, 0.25]])  # rows leave 0.2, 0.1, 0.5 as invalid votes
    votes, weights = vote_distribution(probs)
    full = np.concatenate([probs, 1 - probs.sum(axis=1, keepdims=True)], axis=1)
    brute: dict[tuple[int, int], float] = {}
    for choice in itertools.product(range(3), repeat=3):
        key = (choice.count(0), choice.count(1))
        brute[key] = brute.get(key, 0.0) + math.prod(full[t, c] for t, c in enumerate(choice))
    assert {tuple(v): w for v, w in zip(votes.tolist(), weights, strict=True)} == pytest.approx(brute)


def test_argmax_probability_against_quadrature_and_closed_form() -> None:
    for v, sigma in [([3, 5, 1, 1], 1.0), ([2, 2, 2, 2], 2.0), ([4, 1, 0], 0.7)]:
        v = np.array(v, dtype=float)

        def integrand(z: float, v: np.ndarray = v, sigma: float = sigma) -> float:
            return stats.norm.pdf(z) * np.prod(stats.norm.cdf((v[0] - v[1:]) / sigma + z))

        expected = integrate.quad(integrand, -30, 30, limit=200)[0]
        assert math.exp(log_prob_argmax(v[None], 0, sigma)[0]) == pytest.approx(expected, rel=1e-8)
    # Two labels: P(v0 + N0 > v1 + N1) = Φ((v0 − v1)/(√2σ)), checked deep in the tail.
    for gap, sigma in [(-10, 0.3), (-2, 1.0), (5, 2.0)]:
        got = log_prob_argmax(np.array([[0.0, -gap]]), 0, sigma)[0]
        assert got == pytest.approx(special.log_ndtr(gap / (math.sqrt(2) * sigma)), rel=1e-6)


@pytest.mark.parametrize("partitions", [4, 10, 40])
def test_exact_audit_of_the_extreme_vote_pattern_is_lemma_3_1(partitions: int) -> None:
    """[1, T−1] vs [0, T]: both statistics are Gaussian with shift 2/(√2σ) = Δ₂/σ, for every T (003 Lemma 3.1)."""
    result = exact_vote_audit(
        _deterministic([1, partitions - 1], partitions),
        _deterministic([0, partitions], partitions),
        sigma=SIGMA,
        target=0,
        other=1,
        delta=1e-5,
    )
    mu = gaussian_mu(VOTE_SENSITIVITY, SIGMA)
    assert result.mu_white_box == pytest.approx(mu, rel=1e-9)
    assert result.mu_black_box == pytest.approx(mu, rel=1e-9)
    assert result.epsilon_white_box < 1.0  # the classic σ is conservative: the exact ε sits below ε = 1


def test_bootstrap_converges_to_the_exact_audit() -> None:
    rng = np.random.default_rng(0)
    t, k = 10, 3
    probs_out = rng.dirichlet(np.ones(k + 1), size=t)[:, :k]
    probs_in = probs_out.copy()
    probs_in[:3] = [[0.9, 0.05, 0.0]] * 3  # the canary sways three partitions toward label 0
    exact = exact_vote_audit(probs_in, probs_out, sigma=1.0, target=0, other=1, delta=1e-5)
    clean_in, clean_out = _sample_votes(probs_in, 20_000, rng), _sample_votes(probs_out, 20_000, rng)
    errors = []
    for n_trials in (2_000, 400_000):
        trials = bootstrap_trials(
            clean_in, clean_out, noisy_vote_release(1.0, 0, 1), n_trials=n_trials, seed=5
        )
        tp, fp = int(trials.decisions_in.sum()), int(trials.decisions_out.sum())
        point = stats.norm.ppf(tp / n_trials) - stats.norm.ppf(fp / n_trials)
        errors.append(abs(point - exact.mu_black_box))
        bound = gdp_bound_from_counts(Counts(tp, n_trials - tp, fp, n_trials - fp))
        assert bound.mu_lower <= exact.mu_black_box + 0.02
    assert errors[1] < 0.02
    assert errors[1] < errors[0]
    assert exact.mu_black_box > 0.5  # a real signal, not a trivially small one


def test_exact_audit_validates_its_input() -> None:
    good = _deterministic([1, 3], 4)
    with pytest.raises(ValueError, match="different labels"):
        exact_vote_audit(good, good, sigma=1.0, target=0, other=0, delta=1e-5)
    with pytest.raises(ValueError, match="at most 1"):
        exact_vote_audit(good * 2, good, sigma=1.0, target=0, other=1, delta=1e-5)
    with pytest.raises(ValueError, match="sigma"):
        exact_vote_audit(good, good, sigma=0.0, target=0, other=1, delta=1e-5)


def test_exact_against_the_strongest_other_label_matches_the_release() -> None:
    """GAP's white-box score Ṽ_t − max_{k≠t} Ṽ_k (other=None), target label index 2 of 4: the exact TPR/FPR
    curves equal a Monte Carlo of `PrivateVoting`'s own release and binary view (the bootstrap's score)."""
    from app.audit.mechanisms.base import BinaryTarget, calibrate
    from app.audit.mechanisms.private_voting import PrivateVoting

    rng = np.random.default_rng(0)
    p_out = rng.dirichlet(np.ones(4), size=2) * 0.9
    p_in = p_out.copy()
    p_in[0] = [0.0, 0.0, 1.0, 0.0]
    mech = PrivateVoting(partitions=2, theory=calibrate(2.0, 1e-5, np.sqrt(2), "analytic"))
    exact = exact_vote_audit(p_in, p_out, sigma=mech.std, target=2, other=None, delta=1e-5)
    assert exact.mu_white_box > 0.1
    i = int(np.argmin(np.abs(exact.thresholds - exact.best_threshold)))
    n = 200_000
    for probs, curve in ((p_in, exact.tpr_white_box), (p_out, exact.fpr_white_box)):
        votes = _sample_votes(probs, n, rng)
        _, score = mech.binary_view(mech.release(votes, rng), BinaryTarget(positive=2, negative=None))
        rate = float((score >= exact.thresholds[i]).mean())
        assert abs(rate - curve[i]) < 5 * math.sqrt(curve[i] * (1 - curve[i]) / n) + 1e-9
