"""The oracle engine, neighbouring contexts, partitions and vote draws."""

from __future__ import annotations

import numpy as np
import pytest

from app.audit.icl import prompts
from app.audit.icl.contexts import build_contexts, partition_disjoint, partition_disjoint_poisson
from app.audit.mechanisms.base import draw_votes, label_distribution
from app.engines.oracle import OracleEngine, OracleRefusal
from app.engines.protocol import Prompt, Sampling


def test_oracle_answers_inquiry_by_exact_search() -> None:
    oracle = OracleEngine()
    present = prompts.fill(
        prompts.INQUIRY, context="Text: a b c\nLabel: x\n\nText: the canary", canary="the canary"
    )
    absent = prompts.fill(prompts.INQUIRY, context="Text: a b c", canary="the canary")
    lp = oracle.label_logprobs([present, absent], ["Yes", "No"])
    assert lp.tolist() == [[0.0, -np.inf], [-np.inf, 0.0]]
    assert oracle.counters.forward_passes == 2


def test_oracle_signal_texts_contextleak_and_refusal() -> None:
    oracle = OracleEngine()
    empty = prompts.fill(prompts.SIGNAL_BLACK_BOX, canary="c", y1="Y1", y0="Y0", context="")
    assert np.allclose(np.exp(oracle.label_logprobs([empty], ["Y1", "Y0"])), [[0.5, 0.5]])
    gens = oracle.generate([empty], Sampling(8, n=200, seed=3))[0]
    assert {g.text for g in gens} == {"Y1", "Y0"}
    system = Prompt(
        prompts.fill(prompts.CANARY_BINARY, canary=prompts.CONTEXTLEAK_CANARY),
        system="x The sun rises in the west. y",
    )
    assert oracle.label_logprobs([system], ["1", "0"]).tolist() == [[0.0, -np.inf]]
    listed = Prompt(prompts.fill(prompts.CANARY_LIST, canary="abc"), system="no canary here")
    assert oracle.generate([listed], Sampling(8))[0][0].text == "[]"
    with pytest.raises(OracleRefusal, match="not a language model"):
        oracle.label_logprobs(["What is the capital of France?"], ["Paris"])


def test_contexts_differ_only_at_the_canary_position(ag_news) -> None:
    data = ag_news
    a = build_contexts(data, 8, np.random.default_rng(5))
    b = build_contexts(data, 8, np.random.default_rng(5))
    assert a == b
    diff = [i for i in range(8) if a.with_canary[i] != a.without[i]]
    assert diff == [a.canary_position] and a.with_canary[a.canary_position] == a.canary
    assert a.canary not in a.without


def test_partitions_are_disjoint_and_seeded() -> None:
    blocks = partition_disjoint(10, 4, np.random.default_rng(0))
    assert sorted(np.concatenate(blocks).tolist()) == list(range(10))
    poisson = partition_disjoint_poisson(40, 4, np.random.default_rng(1))
    joined = np.concatenate(poisson)
    assert len(joined) == len(set(joined.tolist())) and len(poisson) == 4
    assert all(
        np.array_equal(x, y)
        for x, y in zip(poisson, partition_disjoint_poisson(40, 4, np.random.default_rng(1)), strict=True)
    )


def test_votes_are_draws_from_the_label_distribution_with_invalid_mass() -> None:
    probs = label_distribution(np.log([[0.6, 0.2], [1.0, 1e-300]]), temperature=1.0)
    assert np.allclose(probs, [[0.6, 0.2], [1.0, 0.0]])
    votes = draw_votes(probs, 100_000, np.random.default_rng(0))
    assert np.allclose(votes.mean(0), [1.6, 0.2], atol=0.01)  # 0.2 of partition 0's votes are invalid
    # τ = 0: the argmax wins every vote (0.6 beats the 0.2 outside the labels; mechanisms/decoding.py)
    assert np.allclose(label_distribution(np.log([[0.6, 0.2]]), 0.0), [[1.0, 0.0]])
