"""Engine costs on SmolLM2-135M-Instruct (transformers, float32 CPU), measured side by side.

1. audit workload — the prompt calls of a private-voting audit: 32 calls × T = 4 partitions × 2 sides
   (C0, C1) = 256 prompts; AG News, 2 shots per partition, the Inquiry query (003 Prompt 1,
   `app.audit.icl.prompts.INQUIRY`), contexts fixed across calls as in the audit. Baseline: the naive loop
   003 describes, one uncached `generate` call per prompt (sampling at temperature 1, 3 new tokens,
   no prefix reuse). Engine path: one `label_logprobs(prompts, ["Yes", "No"])` call on a fresh engine
   (result cache: 5 distinct prompts; batched; the shared instruction prefix run once). Target ≥ 5×.
2. distinct prompts — 64 different partition prompts (every one computed): `generate` one at a time
   vs one batched `label_logprobs` call, both without result cache; the honest per-prompt gain on a
   CPU, no target.
3. GGUF load — transformers loading the packaged GGUF directly (de-quantizing every time) vs the
   engine loading the safetensors cache; the one-off conversion into an empty cache; and the largest
   |Δ logprob| of the next token between the directly loaded GGUF model and the cached engine.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

MODEL = "smollm2-135m-instruct"
CALLS, PARTITIONS, SHOTS, DISTINCT = 32, 4, 2, 64
ANSWERS = ["Yes", "No"]


def _engine(cache_dir: Path | None = None, **options):
    from app.config import get_settings
    from app.engines.registry import get_model_info
    from app.engines.transformers_engine import TransformersEngine

    info = get_model_info(MODEL)
    return TransformersEngine(info, cache_dir=cache_dir or get_settings().model_cache_dir, **options)


def _partition_prompts(dataset, rng: np.random.Generator) -> tuple[list[str], list[str]]:
    """The T partition prompts of C0 and of C1 (they differ only in the canary's partition)."""
    from app.audit.icl.contexts import build_contexts, format_context, partition_disjoint
    from app.audit.icl.prompts import INQUIRY

    contexts = build_contexts(dataset, PARTITIONS * SHOTS, rng)
    blocks = partition_disjoint(PARTITIONS * SHOTS, PARTITIONS, rng)
    canary = contexts.canary.text

    def prompts(exemplars) -> list[str]:
        return [
            INQUIRY.format(context=format_context([exemplars[i] for i in block]), canary=canary)
            for block in blocks
        ]

    return prompts(contexts.without), prompts(contexts.with_canary)


def _naive(engine, prompts: list[str]) -> tuple[float, int]:
    start = time.perf_counter()
    passes = engine.counters.forward_passes
    for i, prompt in enumerate(prompts):
        engine.generate([prompt], max_new_tokens=3, temperature=1.0, seed=i)
    return time.perf_counter() - start, engine.counters.forward_passes - passes


def _scored(engine, prompts: list[str]) -> tuple[float, int, np.ndarray]:
    start = time.perf_counter()
    passes = engine.counters.forward_passes
    scores = engine.label_logprobs(prompts, ANSWERS)
    return time.perf_counter() - start, engine.counters.forward_passes - passes, scores


def run() -> Iterator[dict]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from app.audit.local import default_data_dir
    from app.datasets.builtin import load_builtin

    dataset = load_builtin("ag_news", default_data_dir())
    rng = np.random.default_rng(0)
    c0, c1 = _partition_prompts(dataset, rng)
    workload = [p for _ in range(CALLS) for p in (*c0, *c1)]

    naive_engine = _engine(result_cache_bytes=0, min_shared_prefix=10**9)
    naive_engine.generate([c0[0]], max_new_tokens=1)  # warm-up, not timed
    naive_s, naive_passes = _naive(naive_engine, workload)
    fast_s, fast_passes, _ = _scored(_engine(), workload)
    yield {
        "name": "audit_workload_naive_generate",
        "value": round(naive_s, 3),
        "unit": "s",
        "calls": len(workload),
    }
    yield {"name": "audit_workload_naive_forward_passes", "value": naive_passes, "unit": "passes"}
    yield {"name": "audit_workload_engine_forward_passes", "value": fast_passes, "unit": "passes"}
    yield {
        "name": "audit_workload_engine",
        "value": round(fast_s, 3),
        "unit": "s",
        "baseline": round(naive_s, 3),
        "ratio": round(naive_s / fast_s, 1),
        "target_ratio": 5.0,
    }

    distinct = []
    while len(distinct) < DISTINCT:
        a, b = _partition_prompts(dataset, rng)
        distinct.extend(a)
    distinct = distinct[:DISTINCT]
    naive_s, naive_passes = _naive(naive_engine, distinct)
    engine = _engine(result_cache_bytes=0)
    fast_s, fast_passes, _ = _scored(engine, distinct)
    yield {
        "name": "distinct_prompts_generate_one_by_one",
        "value": round(naive_s, 3),
        "unit": "s",
        "prompts": DISTINCT,
    }
    yield {
        "name": "distinct_prompts_batched_label_logprobs",
        "value": round(fast_s, 3),
        "unit": "s",
        "baseline": round(naive_s, 3),
        "ratio": round(naive_s / fast_s, 2),
        "forward_passes": fast_passes,
    }

    import torch
    from transformers import AutoModelForCausalLM

    gguf = Path(str(engine.info.source))
    start = time.perf_counter()
    direct = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    direct_s = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        _engine(Path(tmp))
        cold_s = time.perf_counter() - start
        start = time.perf_counter()
        cached = _engine(Path(tmp))
        cached_s = time.perf_counter() - start
        ids = torch.tensor([cached.format_ids(c1[0])])
        with torch.inference_mode():
            a = torch.log_softmax(direct(input_ids=ids).logits[0, -1].double(), dim=-1).numpy()
        b = cached.next_token_logprobs([c1[0]])[0].logprobs
    yield {"name": "gguf_load_direct", "value": round(direct_s, 2), "unit": "s"}
    yield {"name": "gguf_load_cold_convert_into_cache", "value": round(cold_s, 2), "unit": "s"}
    yield {
        "name": "gguf_load_cached",
        "value": round(cached_s, 2),
        "unit": "s",
        "baseline": round(direct_s, 2),
        "ratio": round(direct_s / cached_s, 1),
    }
    yield {
        "name": "gguf_cached_vs_direct_logprob_max_abs_diff",
        "value": float(np.max(np.abs(a - b))),
        "unit": "nats",
    }
