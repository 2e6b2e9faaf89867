"""Run the vllm engine in-process inside .venv-extras and print its answers as JSON (used by test_extras).

Input (stdin, JSON): {"model_dir", "prompts", "labels", "top_k"}. Not a test module itself.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from app.engines.protocol import ModelInfo
from app.engines.vllm_engine import VLLMEngine


def main() -> None:
    spec = json.load(sys.stdin)
    start = time.perf_counter()
    info = ModelInfo(
        name="smollm2-vllm",
        engine="vllm",
        chat=True,
        source=spec["model_dir"],
        options={"dtype": "float32", "distributed_executor_backend": "uni", "max_model_len": 2048},
    )
    engine = VLLMEngine(info, cache_dir=Path(spec["model_dir"]).parent)
    load_s = time.perf_counter() - start
    prompts, labels = spec["prompts"], spec["labels"]
    start = time.perf_counter()
    scores = engine.label_logprobs(prompts, labels)
    passes = engine.counters.forward_passes
    again = engine.label_logprobs(prompts, labels)
    full = engine.next_token_logprobs(prompts[:1], top_k="all")[0].logprobs
    top = engine.next_token_logprobs(prompts[:1], top_k=spec["top_k"])[0]
    gen_a = engine.generate(prompts[:1], max_new_tokens=6, temperature=0.8, seed=3, n=2)[0]
    gen_b = engine.generate(prompts[:1], max_new_tokens=6, temperature=0.8, seed=3, n=2)[0]
    json.dump(
        {
            "load_s": load_s,
            "score_s": time.perf_counter() - start,
            "vocab_size": engine.vocab_size,
            "label_ids": [list(engine.encode(label)) for label in labels],
            "scores": scores.tolist(),
            "again_equal": bool(np.array_equal(scores, again)),
            "passes_first": passes,
            "passes_after_repeat": engine.counters.forward_passes - passes,
            "full_logsumexp": float(np.logaddexp.reduce(full[np.isfinite(full)])),
            "full_first_prompt": full[top.token_ids].tolist(),
            "top_ids": top.token_ids.tolist(),
            "top_logprobs": top.logprobs.tolist(),
            "gen_same_seed_equal": [g.token_ids for g in gen_a] == [g.token_ids for g in gen_b],
            "gen": [
                {"ids": list(g.token_ids), "logprobs": list(g.token_logprobs), "text": g.text} for g in gen_a
            ],
            "counters": engine.counters.as_dict(),
        },
        sys.stdout,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
