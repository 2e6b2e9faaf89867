"""The transformers engine on the real SmolLM2-135M-Instruct (packaged GGUF, cached safetensors)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.special import logsumexp

from app.engines.prefix_kv import lcp
from app.engines.protocol import LLMEngine, Prompt, Sampling
from app.engines.transformers_engine import PromptTooLong, TransformersEngine

pytestmark = pytest.mark.slow

CONTEXT = "Classify the sentiment of each review as positive or negative.\n" + "\n".join(
    f"Review: the {k}th film was {'wonderful' if k % 2 else 'dreadful'}.\nSentiment: "
    f"{'positive' if k % 2 else 'negative'}"
    for k in range(1, 7)
)
QUERIES = [
    "\nReview: an honest, moving story.\nSentiment:",
    "\nReview: two hours I will never get back.\nSentiment:",
    "\nReview: fine.\nSentiment:",
]
DEMOS = CONTEXT.split("\n")[1:]
HEAD = CONTEXT.split("\n")[0] + "\n"
DEMO_BLOCKS = ["\n".join(DEMOS[i : i + 2]) for i in range(0, len(DEMOS), 2)]
# ICLInf's k + 1 prompts: all six demonstrations, then each one left out
LEAVE_ONE_OUT = [HEAD + "\n".join(DEMO_BLOCKS) + QUERIES[0]] + [
    HEAD + "\n".join(DEMO_BLOCKS[:i] + DEMO_BLOCKS[i + 1 :]) + QUERIES[0] for i in range(len(DEMO_BLOCKS))
]
PROMPTS = [CONTEXT + q for q in QUERIES] + ["What is the capital of France?", "Say yes."]
LABELS = [" positive", "negative", " Paris", "yes", " not at all sure"]


@pytest.fixture
def engine(smollm2: TransformersEngine) -> TransformersEngine:
    """The session engine with an empty result cache and prefix cache, shared-prefix path on."""
    smollm2.cache.clear()
    smollm2.kv_store.clear()
    smollm2.kv_store.max_bytes = 512 * 2**20
    smollm2.min_shared_prefix = 16
    return smollm2


def test_implements_the_protocol(engine: TransformersEngine) -> None:
    assert isinstance(engine, LLMEngine)
    assert engine.vocab_size == 49152
    assert engine.eos_token_ids


def test_chat_template_wraps_user_text_and_system_message(engine: TransformersEngine) -> None:
    text = engine.tokenizer.decode(engine.format_ids(Prompt("Hello there", system="Be terse.")))
    assert "<|im_start|>system\nBe terse.<|im_end|>" in text
    assert "<|im_start|>user\nHello there<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")
    ids = engine.format_ids(Prompt("Hello", continuation=(42, 43)))
    assert ids[-2:] == (42, 43)
    assert ids[:-2] == engine.format_ids("Hello")


def test_batched_equals_single_and_prefix_path_equals_plain(engine: TransformersEngine) -> None:
    batched = engine.label_logprobs(PROMPTS, LABELS)
    assert batched.shape == (len(PROMPTS), len(LABELS))
    assert np.all(np.isfinite(batched)) and np.all(batched < 0)
    engine.cache.clear()
    single = np.vstack([engine.label_logprobs([p], LABELS) for p in PROMPTS])
    np.testing.assert_allclose(batched, single, atol=1e-4, rtol=0)
    engine.cache.clear()
    engine.kv_store.clear()
    engine.min_shared_prefix = 10**9  # force the plain left-padded path
    plain = engine.label_logprobs(PROMPTS, LABELS)
    np.testing.assert_allclose(batched, plain, atol=1e-4, rtol=0)
    # the model is not guessing at random: the demonstrations steer the first query to " positive"
    assert batched[0, 0] > batched[1, 0]


def test_shared_prefix_is_computed_once(engine: TransformersEngine) -> None:
    ids = [engine.format_ids(p) for p in PROMPTS[:3]]
    shared = min(lcp(ids[0], other) for other in ids[1:])
    assert shared > 100  # chat header + instruction + six demonstrations
    before = engine.counters.as_dict()
    engine.next_token_logprobs(PROMPTS[:3])
    after = engine.counters.as_dict()
    assert after["forward_passes"] - before["forward_passes"] == 2  # the prefix, then the 3 suffixes
    fed = after["prompt_tokens"] - before["prompt_tokens"]
    assert fed == sum(len(i) for i in ids) - 2 * shared


def test_leave_one_out_prompts_reuse_the_longest_cached_prefix(engine: TransformersEngine) -> None:
    labels = [" positive", " negative", " not at all sure"]
    ids = [engine.format_ids(p) for p in LEAVE_ONE_OUT]
    multi = engine.encode(labels[2])
    before = engine.counters.as_dict()
    fast = engine.label_logprobs(LEAVE_ONE_OUT, labels)
    after = engine.counters.as_dict()
    # the full context once; leave-one-out i only after its removed exemplar; labels only their tokens
    reused = [lcp(i, ids[0]) for i in ids[1:]]
    assert reused == sorted(set(reused))  # later removed → more shared
    assert reused[0] > 30 and reused[-1] > 100  # the chat header + instruction; + five demonstrations
    fed = len(ids[0]) + sum(len(i) - r for i, r in zip(ids[1:], reused, strict=True))
    assert after["prompt_tokens"] - before["prompt_tokens"] == fed + len(ids) * (len(multi) - 1)
    assert after["forward_passes"] - before["forward_passes"] <= len(ids)  # ≤ k + 1
    engine.cache.clear()
    engine.kv_store.clear()
    engine.min_shared_prefix = 10**9  # every sequence from scratch
    before = engine.counters.prompt_tokens
    plain = engine.label_logprobs(LEAVE_ONE_OUT, labels)
    assert engine.counters.prompt_tokens - before == sum(2 * len(i) + len(multi) - 1 for i in ids)
    np.testing.assert_allclose(fast, plain, atol=1e-4, rtol=0)
    # a KV store that holds about one prompt: entries are evicted mid-call, the values do not change
    engine.cache.clear()
    engine.min_shared_prefix = 16
    engine.kv_store.max_bytes = _kv_bytes_per_token(engine) * (len(ids[0]) + 10)
    small = engine.label_logprobs(LEAVE_ONE_OUT, labels)
    assert len(engine.kv_store) == 1
    np.testing.assert_allclose(small, plain, atol=1e-4, rtol=0)


def _kv_bytes_per_token(engine: TransformersEngine) -> int:
    config = engine.model.config
    head_dim = config.hidden_size // config.num_attention_heads
    return config.num_hidden_layers * 2 * config.num_key_value_heads * head_dim * 4


def test_multi_token_label_feeds_only_its_own_tokens(engine: TransformersEngine) -> None:
    label = " not at all sure"
    tokens = engine.encode(label)
    engine.next_token_logprobs([PROMPTS[0]])  # the prompt's distribution and KV cache are kept
    before = engine.counters.as_dict()
    engine.label_logprobs([PROMPTS[0]], [" positive", label])
    after = engine.counters.as_dict()
    assert after["forward_passes"] - before["forward_passes"] == 1
    assert after["prompt_tokens"] - before["prompt_tokens"] == len(tokens) - 1


def test_multi_token_label_is_the_sum_of_its_token_logprobs(engine: TransformersEngine) -> None:
    label = " not at all sure"
    tokens = engine.encode(label)
    assert len(tokens) > 1
    whole = engine.label_logprobs([PROMPTS[0]], [label])[0, 0]
    steps = [
        engine.next_token_logprobs([Prompt(PROMPTS[0], continuation=tokens[:j])])[0].logprobs[tokens[j]]
        for j in range(len(tokens))
    ]
    assert whole == pytest.approx(sum(steps), abs=1e-4)


def test_next_token_distribution_full_and_top_k(engine: TransformersEngine) -> None:
    full = engine.next_token_logprobs([PROMPTS[3]], top_k="all")[0]
    assert full.token_ids is None and full.logprobs.shape == (engine.vocab_size,)
    assert logsumexp(full.logprobs) == pytest.approx(0.0, abs=1e-9)
    top = engine.next_token_logprobs([PROMPTS[3]], top_k=5)[0]
    order = np.argsort(-full.logprobs)[:5]
    np.testing.assert_array_equal(top.token_ids, order)
    np.testing.assert_allclose(top.logprobs, full.logprobs[order])
    assert top.floor == pytest.approx(full.logprobs[order[-1]])
    assert top.tokens is not None and len(top.tokens) == 5
    assert engine.decode([int(order[0])]) == top.tokens[0]
    with pytest.raises(ValueError, match="top_k"):
        engine.next_token_logprobs([PROMPTS[3]], top_k=0)


def test_repeated_prompts_cost_no_forward_pass(engine: TransformersEngine) -> None:
    engine.label_logprobs(PROMPTS[:2], LABELS)
    before = engine.counters.as_dict()
    again = engine.label_logprobs([PROMPTS[1], PROMPTS[0], PROMPTS[1]], LABELS)
    after = engine.counters.as_dict()
    assert after["forward_passes"] == before["forward_passes"]
    assert after["prompt_tokens"] == before["prompt_tokens"]
    assert after["cache_hits"] > before["cache_hits"]
    np.testing.assert_array_equal(again[0], again[2])
    # identical prompts within one call are computed once too
    engine.cache.clear()
    before = engine.counters.forward_passes
    engine.next_token_logprobs([PROMPTS[4]] * 5)
    assert engine.counters.forward_passes - before == 1


def test_generate_is_seeded_and_reports_raw_logprobs(engine: TransformersEngine) -> None:
    prompts = [PROMPTS[3], PROMPTS[4]]
    first = engine.generate(prompts, Sampling(4, temperature=0.8, seed=7, n=2))
    assert [len(r) for r in first] == [2, 2]
    engine.cache.clear()
    alone = engine.generate([PROMPTS[4]], Sampling(4, temperature=0.8, seed=7, n=2))
    assert [g.token_ids for g in alone[0]] == [g.token_ids for g in first[1]]
    gen = first[0][0]
    assert 1 <= len(gen.token_ids) <= 4 and len(gen.token_logprobs) == len(gen.token_ids)
    assert gen.text == engine.decode(gen.token_ids)
    # each reported logprob is the model's own next-token logprob at that point
    for j in range(len(gen.token_ids)):
        dist = engine.next_token_logprobs([Prompt(PROMPTS[3], continuation=gen.token_ids[:j])])[0]
        assert gen.token_logprobs[j] == pytest.approx(dist.logprobs[gen.token_ids[j]], abs=1e-4)
    greedy = engine.generate([PROMPTS[3]], Sampling(1, temperature=0.0))[0][0]
    argmax = int(np.argmax(engine.next_token_logprobs([PROMPTS[3]])[0].logprobs))
    assert greedy.token_ids == (argmax,)
    engine.cache.clear()
    other_seed = engine.generate(prompts, Sampling(4, temperature=0.8, seed=8, n=2))
    assert [g.token_ids for r in other_seed for g in r] != [g.token_ids for r in first for g in r]


def test_generate_prefills_each_prompt_once_on_its_longest_cached_prefix(engine: TransformersEngine) -> None:
    prompts, n = PROMPTS[:2], 3  # two queries on one six-review context, three samples each
    ids = [engine.format_ids(p) for p in prompts]

    def fed(kv_bytes: int, temperature: float) -> tuple[list[list[object]], int]:
        engine.cache.clear()
        engine.kv_store.clear()
        engine.kv_store.max_bytes = kv_bytes
        before = engine.counters.prompt_tokens
        out = engine.generate(prompts, Sampling(6, temperature=temperature, seed=5, n=n))
        return out, engine.counters.prompt_tokens - before

    for temperature in (0.0, 0.9):
        scratch, scratch_fed = fed(0, temperature)  # no store: every sample feeds its whole prompt
        reused, reused_fed = fed(512 * 2**20, temperature)
        assert scratch_fed == n * sum(len(i) for i in ids)
        # the first prompt once, the second only past what it shares with the first
        assert reused_fed == len(ids[0]) + len(ids[1]) - lcp(ids[0], ids[1])
        for a, b in zip(scratch, reused, strict=True):
            assert [g.token_ids for g in a] == [g.token_ids for g in b]
            for ga, gb in zip(a, b, strict=True):
                assert gb.token_logprobs == pytest.approx(ga.token_logprobs, abs=1e-4)


def test_prompt_longer_than_the_context_is_refused(engine: TransformersEngine) -> None:
    too_long = Prompt("hi", continuation=tuple([100] * (engine.context_length or 0)))
    with pytest.raises(PromptTooLong, match="context length"):
        engine.next_token_logprobs([too_long])


def test_cached_safetensors_give_identical_logits(engine: TransformersEngine) -> None:
    from app.config import get_settings
    from app.engines.gguf import is_converted

    gguf = engine.info.source
    assert gguf is not None and gguf.endswith(".gguf")
    assert is_converted(Path(gguf), get_settings().model_cache_dir)
    assert (engine.model_dir / "model.safetensors").is_file()
    second = TransformersEngine(engine.info, cache_dir=get_settings().model_cache_dir)
    assert second.model_dir == engine.model_dir
    a = engine.next_token_logprobs([PROMPTS[3]])[0].logprobs
    b = second.next_token_logprobs([PROMPTS[3]])[0].logprobs
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_thread_count_is_fixed_whatever_the_load(engine: TransformersEngine, monkeypatch) -> None:
    """The intra-op thread count is the engine's setting on an idle and on an oversubscribed machine (the
    load average is not read), and every call runs on it; `runtime()` records it with the versions."""
    import os

    import torch

    from app.engines import transformers_engine as te

    cores = len(os.sched_getaffinity(0))
    assert te.default_threads() == cores and te.default_threads(cores) == 1 and te.default_threads(10**6) == 1
    for load in (cores + 5.0, 0.0):
        monkeypatch.setattr(os, "getloadavg", lambda load=load: (load, load, load))
        engine.label_logprobs(PROMPTS[:1], LABELS[:1])
        assert torch.get_num_threads() == engine.threads
    runtime = engine.runtime()
    assert (
        runtime["threads"] == engine.threads and runtime["device"] == "cpu" and runtime["dtype"] == "float32"
    )
    assert runtime["versions"]["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert set(runtime["versions"]) >= {"torch", "transformers", "numpy"}


TOLERANCE = 1e-4
"""How far one thread and two may move a score: a different thread count sums some reductions in another
order (measured: up to 3e-5 on SmolLM2's label log-probabilities, 0 on next-token ones)."""


def test_an_audit_on_one_and_two_threads(engine: TransformersEngine) -> None:
    """The same request and seed on one thread, again on one thread, and on two: one thread twice gives
    the same result bit for bit; two threads move no score by more than TOLERANCE, and the verdict, the
    bounds and the decision counts, which read the scores only through their order against thresholds, are
    the same."""
    import json

    from app.audit.runtime import RunContext
    from app.audit.standalone import LocalDatasets, default_data_dir, run_request

    body = json.loads(
        (Path(__file__).resolve().parents[2] / "examples/mia-demo-synthetic-records.json").read_text()
    )
    body["llm_calls"] = 24

    class Engines:
        def llm(self, name: str) -> TransformersEngine:
            assert name == engine.name
            return engine

        def embedder(self, name: str | None = None):
            raise AssertionError("no embedder in this audit")

    def audit(threads: int) -> dict:
        engine.threads = threads
        engine.cache.clear()
        engine.kv_store.clear()
        ctx = RunContext(engines=Engines(), datasets=LocalDatasets(default_data_dir()))
        return json.loads(json.dumps(run_request(body, ctx)))

    original = engine.threads
    try:
        one, again, two = audit(1), audit(1), audit(2)
    finally:
        engine.threads = original
    assert json.dumps(one, sort_keys=True) == json.dumps(again, sort_keys=True)
    assert one["verdict"] is not None and one["verdict"] == two["verdict"]

    def leaves(value, path=""):
        if isinstance(value, dict):
            for key, item in value.items():
                yield from leaves(item, f"{path}.{key}")
        elif isinstance(value, list):
            for k, item in enumerate(value):
                yield from leaves(item, f"{path}[{k}]")
        else:
            yield path, value

    a, b = dict(leaves(one)), dict(leaves(two))
    assert a.keys() == b.keys()
    moved = {p: (a[p], b[p]) for p in a if a[p] != b[p]}
    for path, (x, y) in moved.items():
        assert isinstance(x, float) and isinstance(y, float), (path, x, y)
        assert abs(x - y) <= TOLERANCE, (path, x, y)
    assert not [p for p in moved if "epsilon" in p or p.endswith((".tp", ".fn", ".fp", ".tn"))], moved
