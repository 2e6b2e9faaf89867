"""GAP and brainwash (003's classification baselines) and the utility measures, for real."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import read_dataset
from rouge_score import rouge_scorer

from app.audit.attacks.registry import attack_module
from app.audit.icl.contexts import build_contexts
from app.audit.icl.prompts import MISLABEL
from app.audit.icl.utility import utility
from app.audit.kinds import mia
from app.audit.kinds.mia import AttackSpec
from app.audit.mechanisms.base import CleanSource, calibrate
from app.audit.mechanisms.esa import ESA
from app.audit.mechanisms.private_voting import PrivateVoting
from app.engines.oracle import OracleEngine
from app.engines.protocol import Prompt


def test_brainwash_injects_the_canary_six_times_with_a_wrong_label(ag_news) -> None:
    ctx = build_contexts(ag_news, 4, np.random.default_rng(0))
    query = attack_module("brainwash").build_query(
        canary=ctx.canary, dataset=ag_news, spec=AttackSpec(name="brainwash"), rng=np.random.default_rng(1)
    )
    assert len(query.injected) == 6 and {e.text for e in query.injected} == {ctx.canary.text}
    assert query.injected[0].label != ctx.canary.label and query.injected[0].label in ag_news.labels
    assert query.answers[query.positive] == ctx.canary.label  # member = the true label survives
    assert query.prompt(ctx.without).text.count(ctx.canary.text) == 7  # 6 injected + the query text
    gap = attack_module("gap").build_query(
        canary=ctx.canary, dataset=ag_news, spec=AttackSpec(name="gap"), rng=np.random.default_rng(1)
    )
    assert gap.injected == () and gap.negative is None and gap.template == MISLABEL


@pytest.mark.slow
def test_gap_and_brainwash_with_smollm2(oracle_ctx, smollm2) -> None:
    """Both run end to end on T + 1 distinct prompts (trec: short questions, cheap on CPU); SmolLM2
    labels the canary from its own knowledge whether or not it is in the context (003 §3.2), so
    neither exceeds the mechanism's ceiling."""
    oracle_ctx.engines.llms["smollm2"] = smollm2
    for attack in ("gap", "brainwash"):
        body = {
            "kind": "mia",
            "dataset": "trec",
            "model": "smollm2",
            "epsilon": 8.0,
            "trials": 10_000,
            "mechanism": {"name": "private_voting", "partitions": 2, "shots_per_partition": 1},
            "attack": {"name": attack},
        }
        r = mia.run(mia.Request.model_validate(body), oracle_ctx).stored()
        assert r["distinct_prompts"] == 3, attack
        for tm in ("black_box", "white_box"):
            assert 0.0 <= r[tm]["epsilon_empirical"] <= r["epsilon_ceiling"], (attack, tm)
        assert not r["violation"]


@pytest.mark.slow
def test_classification_utility_private_vs_zero_shot(smollm2) -> None:
    trec = read_dataset("trec")
    mechanism = PrivateVoting(partitions=2, theory=calibrate(8.0, 1e-5, np.sqrt(2), "classic"))
    ctx = build_contexts(trec, 2, np.random.default_rng(0))
    parts = mechanism.partition(ctx, np.random.default_rng(1))[1]
    result = utility(mechanism, trec, parts, CleanSource(smollm2), 3, np.random.default_rng(2))
    labels = trec.labels
    zero = [
        Prompt(MISLABEL.format(labels=", ".join(labels), context="", canary=e.text)) for e in trec.test[:3]
    ]
    expected = np.mean(
        [
            labels[int(np.argmax(row))] == e.label
            for row, e in zip(smollm2.label_logprobs(zero, labels), trec.test[:3], strict=True)
        ]
    )
    assert result["queries"] == 3
    assert result["accuracy"]["zero_shot"] == pytest.approx(expected)
    assert 0.0 <= result["accuracy"]["private"] <= 1.0


@pytest.mark.slow
def test_generation_utility_is_rouge_of_the_released_candidate(smollm2, minilm) -> None:
    samsum = read_dataset("samsum")
    mechanism = ESA(
        partitions=2, theory=calibrate(8.0, 1e-5, 1.0, "analytic"), candidates=2, max_new_tokens=12
    )
    ctx = build_contexts(samsum, 2, np.random.default_rng(0))
    parts = mechanism.partition(ctx, np.random.default_rng(1))[1]
    result = utility(mechanism, samsum, parts, CleanSource(smollm2, minilm), 1, np.random.default_rng(2))
    scorer = rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=True)
    reference = samsum.test[0].summary
    per_candidate = [scorer.score(reference, text) for text in mechanism.candidate_texts]
    assert result["rouge1"]["zero_shot"] == pytest.approx(per_candidate[0]["rouge1"].fmeasure)
    assert any(result["rougeL"]["private"] == pytest.approx(s["rougeL"].fmeasure) for s in per_candidate)


def test_utility_is_skipped_with_a_reason_when_the_engine_cannot_answer(ag_news) -> None:
    mechanism = PrivateVoting(partitions=1, theory=calibrate(1.0, 1e-5, np.sqrt(2), "classic"))
    result = utility(mechanism, ag_news, [()], CleanSource(OracleEngine()), 3, np.random.default_rng(0))
    assert "not a language model" in result["skipped"]


class _Recording(CleanSource):
    """A CleanSource that keeps every prompt the utility sends (label scores and votes)."""

    def __init__(self, llm) -> None:
        super().__init__(llm)
        self.sent: list[Prompt] = []

    def label_logprobs(self, prompts, answers):
        self.sent += list(prompts)
        return super().label_logprobs(prompts, answers)

    def vote_probs(self, prompts, answers, temperature, chunk=16):
        self.sent += list(prompts)
        return super().vote_probs(prompts, answers, temperature, chunk)


@pytest.mark.slow
def test_utility_under_a_prompt_defense_places_it_as_the_audit_does(smollm2) -> None:
    """The utility queries are sent as the audit's are (002 §3.2): the exemplars, then the defense, in the
    system prompt; the user turn holds the query only."""
    from app.audit.icl.prompts import DEFENSES
    from app.audit.mechanisms.prompt_defense import PromptDefense

    trec = read_dataset("trec")
    mechanism = PromptDefense(level=2)
    ctx = build_contexts(trec, 2, np.random.default_rng(0))
    parts = mechanism.partition(ctx, np.random.default_rng(1))[1]
    source = _Recording(smollm2)
    result = utility(mechanism, trec, parts, source, 1, np.random.default_rng(2))
    assert result["queries"] == 1 and source.sent
    exemplars = [e.text for part in parts for e in part]
    for prompt in source.sent:
        assert prompt.system.endswith(DEFENSES[2]), prompt
        assert not any(text in prompt.text for text in exemplars), prompt
    assert any(all(text in p.system for text in exemplars) for p in source.sent)
