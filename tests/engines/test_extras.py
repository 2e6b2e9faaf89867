"""vLLM in-process and the openai engine against real vLLM OpenAI-compatible servers (extras venv).

Every answer is checked against the transformers engine on the same SmolLM2 weights: vLLM loads the
same float32 safetensors, so it must agree to ~1e-3.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from app.engines.openai_engine import OpenAIEngine
from app.engines.protocol import ModelInfo, Prompt, Sampling
from app.engines.transformers_engine import TransformersEngine
from testkit.extras import ROOT, VLLM_PROBE, extras_env

pytestmark = [pytest.mark.extras, pytest.mark.slow]

YES_NO = "Is the sky blue? Answer yes or no."
CAPITAL = "What is the capital of France? Answer in one word."


def _openai(base_url: str, *, chat: bool, **options) -> OpenAIEngine:
    info = ModelInfo(
        name="served",
        engine="openai",
        chat=chat,
        options={"base_url": base_url, "model": "smollm2", **options},
    )
    return OpenAIEngine(info)


def _as_base(engine: TransformersEngine) -> TransformersEngine:
    """The same loaded model, prompted as a base model (raw text), sharing nothing mutable that matters."""
    clone = object.__new__(TransformersEngine)
    clone.__dict__.update(engine.__dict__)
    clone.info = dataclasses.replace(engine.info, chat=False)
    clone.cache = type(engine.cache)()
    return clone


def test_vllm_engine_in_process_matches_transformers(extras_python: Path, smollm2_dir: Path, smollm2) -> None:
    labels = ["Yes", "No", " Paris", "Paris is nice"]
    spec = {"model_dir": str(smollm2_dir), "prompts": [YES_NO, CAPITAL], "labels": labels, "top_k": 5}
    run = subprocess.run(
        [str(extras_python), str(VLLM_PROBE), "check"],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        env=extras_env(),
        cwd=ROOT,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads([line for line in run.stdout.splitlines() if line.startswith("{")][-1])
    expected = smollm2.label_logprobs([YES_NO, CAPITAL], labels)
    np.testing.assert_allclose(np.array(got["scores"]), expected, atol=5e-4, rtol=0)
    assert got["label_ids"] == [list(smollm2.encode(label)) for label in labels]
    assert got["vocab_size"] == smollm2.vocab_size
    assert got["again_equal"] and got["passes_first"] == 1
    assert abs(got["full_logsumexp"]) < 1e-3
    top = smollm2.next_token_logprobs([YES_NO], top_k=5)[0]
    assert got["top_ids"] == top.token_ids.tolist()
    np.testing.assert_allclose(got["top_logprobs"], top.logprobs, atol=5e-4)
    assert got["gen_same_seed_equal"]
    for gen in got["gen"]:
        first = smollm2.next_token_logprobs([YES_NO])[0].logprobs[gen["ids"][0]]
        assert gen["logprobs"][0] == pytest.approx(first, abs=5e-4)
        assert gen["text"] == smollm2.decode(gen["ids"])


def test_openai_chat_top_k_against_vllm_server(vllm_server: str, smollm2) -> None:
    """Chat without continuation: a label is scored from the top-k lists, bounded past its first token."""
    engine = _openai(vllm_server, chat=True, top_k=10)
    top = engine.next_token_logprobs([YES_NO], top_k=5)[0]
    reference = smollm2.next_token_logprobs([YES_NO], top_k=5)[0]
    assert top.tokens is not None and top.tokens[0] == reference.tokens[0]
    ref = dict(zip(reference.tokens or (), reference.logprobs, strict=True))
    for token, lp in zip(top.tokens, top.logprobs, strict=True):
        if token in ref:
            assert lp == pytest.approx(ref[token], abs=1e-3)
    assert top.floor == top.logprobs[-1]

    scores = engine.label_scores([YES_NO], ["Yes", "No", " Paris"])
    assert not scores.is_bound[0, 0] and not scores.is_bound[0, 1]
    listed = dict(zip(top.tokens, top.logprobs, strict=True))
    assert scores.logprobs[0, 1] == pytest.approx(listed["No"])
    # " Paris" is not among the top 10 after a yes/no question: reported as ≤ the 10th logprob
    assert scores.is_bound[0, 2]
    tenth = engine.next_token_logprobs([YES_NO], top_k=10)[0].floor
    assert scores.logprobs[0, 2] == pytest.approx(tenth)
    assert smollm2.label_logprobs([YES_NO], [" Paris"])[0, 0] <= tenth + 1e-3

    passes = engine.counters.forward_passes
    engine.label_scores([YES_NO], ["Yes", "No"])
    assert engine.counters.forward_passes == passes  # answered from the result cache

    gens = engine.generate([Prompt("Say hello.", system="You are brief.")], Sampling(5, temperature=0.7))
    assert len(gens[0]) == 1 and gens[0][0].text


def test_openai_completions_against_vllm_server(vllm_server: str, smollm2) -> None:
    engine = _openai(vllm_server, chat=False, top_k=10)
    base = _as_base(smollm2)
    # after this raw prompt the greedy token is end-of-text: the listed distribution must still be the model's
    top = engine.next_token_logprobs([YES_NO], top_k=3)[0]
    reference = base.next_token_logprobs([YES_NO], top_k=3)[0]
    np.testing.assert_allclose(top.logprobs, reference.logprobs, atol=1e-3)
    assert top.tokens[1:] == reference.tokens[1:]

    prompt = "The capital of France is"
    greedy = base.generate([prompt], Sampling(3, temperature=0.0))[0][0]
    label = greedy.text
    scores = engine.label_scores([prompt], [label])
    assert not scores.is_bound[0, 0]
    assert scores.logprobs[0, 0] == pytest.approx(base.label_logprobs([prompt], [label])[0, 0], abs=1e-3)
    gens = engine.generate([prompt], Sampling(4, temperature=0.7, seed=1))
    assert len(gens[0][0].token_logprobs) >= 1


def test_openai_against_vllm_server(vllm_server: str, smollm2) -> None:
    chat = _openai(vllm_server, chat=True, top_k=20, continue_final_message=True)
    greedy = smollm2.generate([CAPITAL], Sampling(3, temperature=0.0))[0][0]
    labels = ["No", "Yes", greedy.text]
    scores = chat.label_scores([CAPITAL, YES_NO], labels)
    expected = smollm2.label_logprobs([CAPITAL, YES_NO], labels)
    exact = ~scores.is_bound
    assert exact[0, 2] and exact[1, 0] and exact[1, 1]  # the greedy answer is in the top k at every step
    np.testing.assert_allclose(scores.logprobs[exact], expected[exact], atol=1e-3)
    assert np.all(scores.logprobs[~exact] >= expected[~exact] - 1e-3)  # bounds are upper bounds

    ids = _openai(vllm_server, chat=True, top_k=20, tokens_as_ids=True)
    top = ids.next_token_logprobs([YES_NO], top_k=5)[0]
    reference = smollm2.next_token_logprobs([YES_NO], top_k=5)[0]
    np.testing.assert_array_equal(top.token_ids, reference.token_ids)
    np.testing.assert_allclose(top.logprobs, reference.logprobs, atol=1e-3)

    completions = _openai(vllm_server, chat=False, top_k=20)
    base = _as_base(smollm2)
    prompt = "The capital of France is"
    label = base.generate([prompt], Sampling(3, temperature=0.0))[0][0].text
    got = completions.label_scores([prompt], [label])
    assert not got.is_bound[0, 0]
    assert got.logprobs[0, 0] == pytest.approx(base.label_logprobs([prompt], [label])[0, 0], abs=1e-3)
    first = completions.generate([prompt], Sampling(5, temperature=0.8, seed=11))
    again = completions.generate([prompt], Sampling(5, temperature=0.8, seed=11))
    assert first[0][0].text == again[0][0].text  # vLLM honours the seed


def test_openai_embedder_against_vllm_server(vllm_embedding_server: str, smollm2) -> None:
    import torch

    from app.engines.embedders import OpenAIEmbedder

    embedder = OpenAIEmbedder("served", base_url=vllm_embedding_server, model="smollm2", batch_size=2)
    texts = ["The patient reports chest pain.", "Chest pain when exercising.", "Stocks closed higher."]
    vectors = embedder.embed(texts)
    assert vectors.shape == (3, 576) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(embedder.embed(texts[1:2])[0], vectors[1], atol=1e-5)
    assert not np.allclose(vectors[0], vectors[2], atol=1e-2)
    assert embedder.embed([]).shape[0] == 0
    # the model's own embedding: SmolLM2's last hidden states (after the final norm), mean-pooled
    with torch.inference_mode():
        ids = smollm2.tokenizer(texts[0], return_tensors="pt").input_ids
        hidden = smollm2.model(ids, output_hidden_states=True).hidden_states[-1][0].mean(dim=0)
    np.testing.assert_allclose(vectors[0], (hidden / hidden.norm()).numpy(), atol=1e-4)
