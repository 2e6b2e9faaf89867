"""Simulated votes vs real SmolLM2 decoding (app/audit/mechanisms/decoding.py, app/audit/icl/vote_fidelity.py).

The fast tests check the decoding equations on hand-made distributions; the slow one compares the
mechanism's own simulated votes with 200 real SmolLM2 generations per temperature τ ∈ {0, 0.5, 1}
(the larger two-prompt run is docs/results/vote_fidelity.py, tabulated in docs/results/iclinf.md).
"""

from __future__ import annotations

import numpy as np
import pytest

from app.audit.icl.vote_fidelity import compare
from app.audit.mechanisms.base import CleanSource, label_distribution
from app.audit.mechanisms.decoding import (
    longest_match,
    parse_vote,
    sequence_logprobs,
    tempered_token_logprobs,
)
from app.audit.mechanisms.plain import PlainICL
from app.engines.protocol import Prompt

# "Yes"/"No" (capitalized) and "yes"/"no": the greedy answer "No." is a label; at τ = 0.5 the valid share
# (0.69) is far from the τ = 1 label mass (0.38) that votes were simulated from before
PROMPT = Prompt("Is the sky blue? Answer yes or no.")
LABELS = ["yes", "no", "Yes", "No"]
DRAWS = 200
ALPHA = 1e-4  # per comparison; 3 temperatures × 5 outcomes × 2 tests → familywise false failure ≤ 3e-3


def test_greedy_vote_is_the_vocabulary_argmax() -> None:
    dist = np.log([0.5, 0.3, 0.2])
    assert tempered_token_logprobs(dist, [0, 1, 2], 0.0).tolist() == [0.0, -np.inf, -np.inf]
    # label set {1, 2}: the argmax (token 0) is outside, so greedy votes are invalid
    steps = {(): dist}
    assert np.exp(sequence_logprobs(steps, [(1,), (2,)], 0.0)).tolist() == [0.0, 0.0]
    # label set {0, 2}: token 0 wins every vote although its mass is 0.5
    assert np.exp(sequence_logprobs(steps, [(0,), (2,)], 0.0)).tolist() == [1.0, 0.0]


def test_tempered_valid_share_comes_from_the_whole_vocabulary() -> None:
    dist = np.log([0.5, 0.3, 0.2])
    p = np.exp(sequence_logprobs({(): dist}, [(1,), (2,)], 0.5))
    assert p == pytest.approx(np.array([0.09, 0.04]) / 0.38)  # p_v² / Σ p², not 0.5 × softmax(ℓ/τ)
    assert np.exp(sequence_logprobs({(): dist}, [(1,), (2,)], 1.0)) == pytest.approx([0.3, 0.2])


def test_multi_token_labels_multiply_steps_and_the_longest_match_wins() -> None:
    first, after_a = np.log([0.6, 0.4, 1e-12]), np.log([0.25, 0.25, 0.5])
    steps = {(): first, (0,): after_a}
    labels = [(0,), (0, 2), (1,)]  # "a", "a c", "b": "a" is a prefix of "a c"
    starts = np.exp(sequence_logprobs(steps, labels, 1.0))
    assert starts == pytest.approx([0.6, 0.3, 0.4])
    assert longest_match(starts[None, :], labels)[0] == pytest.approx([0.3, 0.3, 0.4])
    assert (
        parse_vote((0, 2, 7), labels) == 1
        and parse_vote((0, 1), labels) == 0
        and parse_vote((2,), labels) == -1
    )


def test_label_only_engines_treat_the_rest_as_one_outcome() -> None:
    # exact when the labels hold all the mass (oracle, simulated); τ = 1 is the model's own mass
    assert label_distribution(np.log([[0.7, 0.3]]), 0.0).tolist() == [[1.0, 0.0]]
    assert label_distribution(np.log([[0.6, 0.2]]), 1.0)[0] == pytest.approx([0.6, 0.2])
    assert label_distribution(np.log([[0.6, 0.2]]), 0.0).tolist() == [[1.0, 0.0]]
    assert label_distribution(np.log([[0.3, 0.2]]), 0.0).tolist() == [[0.0, 0.0]]  # the rest (0.5) wins
    assert label_distribution(np.log([[0.6, 0.2]]), 0.5)[0] == pytest.approx(np.array([0.36, 0.04]) / 0.44)


@pytest.mark.slow
def test_mechanism_votes_on_smollm2_use_the_full_vocabulary(smollm2) -> None:
    source = CleanSource(smollm2)
    greedy = PlainICL(temperature=0.0).label_probs([PROMPT], LABELS, source)[0]
    assert greedy.tolist() == [0.0, 0.0, 0.0, 1.0]  # "No" is the vocabulary's argmax: no invalid vote
    one = PlainICL(temperature=1.0).label_probs([PROMPT], LABELS, source)[0]
    assert one == pytest.approx(np.exp(smollm2.label_logprobs([PROMPT], LABELS)[0]))
    half = PlainICL(temperature=0.5).label_probs([PROMPT], LABELS, source)[0]
    assert half.sum() > one.sum() + 0.2  # sharpening moves mass onto the likeliest tokens, labels first


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.0, 0.5, 1.0])
def test_simulated_votes_match_real_generations(smollm2, temperature: float) -> None:
    fid = compare(smollm2, PROMPT, LABELS, temperature, DRAWS, seed=11)
    if temperature == 0:  # greedy decoding is deterministic: every real and simulated vote is "No"
        assert fid.real == fid.simulated == fid.predicted == (0.0, 0.0, 0.0, 1.0, 0.0)
        return
    assert min(fid.p_two_sample) >= ALPHA, fid
    assert min(fid.p_predicted) >= ALPHA, fid
    if temperature == 0.5:  # the test has power: the τ = 1 valid share (before) is rejected
        assert min(fid.p_predicted_before) < 1e-12, fid
