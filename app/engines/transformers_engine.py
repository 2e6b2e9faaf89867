"""The `transformers` engine: a causal LM in-process (float32 on CPU here, any device in production).

What the model sees. A `Prompt` is formatted to token ids once (`format_ids`): chat models (registry
entry `chat: true`) get the tokenizer's chat template with an optional system message and the
generation prompt (`<|im_start|>assistant\\n` for SmolLM2); base models get the raw text (system
message, if any, prepended with a blank line). `Prompt.continuation` token ids are appended after
that, so a partial assistant answer (DP synthetic generation) is scored exactly as the model would
continue it. Labels are tokenized on their own, without special tokens, and appended after the
prompt's ids: `label_logprobs(p, [" yes"])` scores the tokens of " yes", `"yes"` those of "yes".

Scoring. `label_logprobs` returns log p(label | prompt) = Σ_j log p(t_j | prompt, t_<j) over the
label's tokens (not renormalized over the label set). `next_token_logprobs` returns the full
log-softmax over the vocabulary (float64, length `vocab_size`) or its top k (`floor` = k-th value).

Speed, all automatic (no special call needed):
- on a CPU, a fixed intra-op thread count (`threads`, set before every call since torch's is
  process-wide): registry option `threads`, else ICLAUDIT_ENGINE_THREADS, else the cores this process may
  use divided by the audits that run at once (`default_threads`). Fixed, not chosen by the machine's
  load: a different thread count sums some scores in another order (~1e-5 apart), and the same request
  and seed must give the same result on a busy and an idle machine. Dividing the cores also keeps the
  CPU from being oversubscribed: torch's operators are OpenMP regions that end at a barrier, so there
  each waits for the slowest of its threads to be scheduled (one thread measured 2–10× faster on a
  loaded machine, docs/results/engines.md). `runtime()` reports the count and the library versions;
- the weights live in a memory-mapped file that every process on the machine shares
  (`app/engines/shared_weights.py`): N worker processes hold one copy of the model, not N;
- batches of `batch_size` sequences, left padding with explicit position ids (so a batched row
  equals the same prompt alone to ~1e-6), `logits_to_keep` = the positions needed only (1 for
  next-token questions), so the vocabulary projection runs on one position, not the whole prompt;
- **longest-cached-prefix KV reuse** (`app/engines/prefix_kv.py`): the KV caches of sequences
  already run are kept (`kv_cache_bytes`, LRU); a new sequence reuses the longest token-id prefix
  it shares with any of them (at least `min_shared_prefix` tokens), a crop of that cache, and only
  its remaining tokens are fed. Within one call the sequences run in waves so that each waits for
  the one that gives it the most (`next_wave`; the caller's order breaks ties): ICLInf's full
  context runs first, then the k leave-one-out contexts each feed only what follows their removed
  exemplar; a multi-token label feeds only its own tokens after the prompt's cache; a DP
  synthetic-generation step feeds one token per prompt; `generate` prefills each distinct prompt
  once the same way (its n samples and every later prompt sharing its context reuse that cache), then
  decodes step by step on the laid-out caches. A wave is cut into batches of similar
  suffix length (`_batches`); each row has its own past, left-padded and masked. To use it, pass
  all prompts that share a context in ONE call (the first one the one the others share most with),
  e.g. `engine.label_logprobs([full, *leave_one_out], labels)`;
- a result cache keyed by (model, operation, exact token ids, parameters): a repeated question is
  answered without any forward pass (`counters.cache_hits`).

Counters: `forward_passes` counts model invocations (one batched call = one pass), `prompt_tokens`
the non-padding tokens actually fed to the model (so KV reuse and cache hits lower it),
`generated_tokens` the sampled tokens.

Determinism: scoring is deterministic. `generate` draws row j of prompt p from its own torch
Generator seeded by numpy `SeedSequence([seed, j, *hash(token ids of p)])`, so the same seed gives the
same samples whatever the batch it was sent in (up to float ties). Reported token logprobs are
the model's raw log-probabilities (temperature 1, before top-p), like vLLM's and OpenAI's. The end
of sequence token stops a row and is not included in its text or token ids.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from app.engines.cache import ResultCache
from app.engines.prefix_kv import KVStore, next_wave
from app.engines.protocol import (
    EngineCounters,
    Generation,
    ModelInfo,
    Prompt,
    PromptLike,
    TokenDistribution,
    top_k_distribution,
)
from app.engines.shared_weights import share_weights

if TYPE_CHECKING:
    from app.engines.protocol import Sampling

Ids = tuple[int, ...]
Row = tuple[Ids, int, int, Any, bool]
"""(seq, keep, reused, source, store): feed seq[reused:] on the first `reused` positions of the
`source` KV cache (per layer (keys, values); None when reused = 0); keep the last `keep` positions'
log-probabilities; `store`: keep seq's own KV cache afterwards."""

PAD_SLACK = {"cpu": (32, 0.05), "default": (256, 0.5)}
"""How much left padding a batch may carry, (tokens, fraction of its real tokens), by device type.
On a CPU a padded token costs as much as a real one and a forward pass of SmolLM2 about as much as
~40 tokens, so rows of different suffix lengths go in separate passes; accelerators batch more."""


class PromptTooLong(ValueError):
    """A formatted prompt (plus what must be scored after it) exceeds the model's context length."""


def as_prompt(prompt: PromptLike) -> Prompt:
    return Prompt(prompt) if isinstance(prompt, str) else prompt


def _row_kv(t: Any, b: int, kept: slice, tail: int) -> Any:
    """Row b of a layer's batched keys (or values) as its own cache: the `kept` past positions, then
    the row's suffix (positions from `tail` on)."""
    import torch

    return torch.cat([t[b : b + 1, :, kept], t[b : b + 1, :, tail:]], dim=2)


def _batches(rows: Sequence[Row], batch_size: int, slack: tuple[int, float]) -> list[list[Row]]:
    """Rows (seq, keep, reused, source, store) cut into batches of at most `batch_size` rows of similar
    suffix length: a batch is padded to its longest suffix, and padding is real compute, so a row
    joins only while the padding stays within `slack` = (tokens, fraction of the real tokens)."""
    batches: list[list[Row]] = []
    real = 0
    for row in sorted(rows, key=lambda row: len(row[0]) - row[2]):
        length = len(row[0]) - row[2]
        if batches and len(batches[-1]) < batch_size:
            padded = (len(batches[-1]) + 1) * length  # sorted: this row is the batch's longest
            if padded - (real + length) <= max(slack[0], slack[1] * (real + length)):
                batches[-1].append(row)
                real += length
                continue
        batches.append([row])
        real = length
    return batches


def default_threads(concurrent: int = 1) -> int:
    """Intra-op threads when none is configured: the cores this process may use, shared by `concurrent`
    audits running at once on them (at least 1). Depends on the machine and its configuration, never
    on its load (see the module docstring)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // max(1, concurrent))


def runtime_versions() -> dict[str, str]:
    """The versions of the libraries a score depends on, as recorded in a result."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("torch", "transformers", "numpy"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def _ids_seed(seed: int, sample: int, ids: Ids) -> int:
    digest = hashlib.blake2b(np.asarray(ids, dtype=np.int64).tobytes(), digest_size=8).digest()
    words = np.frombuffer(digest, dtype=np.uint32).tolist()
    state = np.random.SeedSequence([seed, sample, *words]).generate_state(2, dtype=np.uint32)
    return int(state[0]) << 32 | int(state[1])


def format_prompt_ids(tokenizer: Any, chat: bool, prompt: PromptLike) -> Ids:
    """Token ids of a prompt: chat template (+ system, + generation prompt) for chat models, raw text
    (system message prepended with a blank line) for base models; then `continuation` appended.
    Shared by the transformers and vLLM engines so both feed the model identical tokens."""
    p = as_prompt(prompt)
    if chat:
        messages = [{"role": "system", "content": p.system}] if p.system else []
        messages.append({"role": "user", "content": p.text})
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = tokenizer(text, add_special_tokens=False).input_ids
    else:
        text = p.text if p.system is None else f"{p.system}\n\n{p.text}"
        ids = tokenizer(text).input_ids
    return tuple(int(i) for i in ids) + tuple(int(i) for i in p.continuation)


class TransformersEngine:
    """A Hugging Face causal LM behind the `LLMEngine` protocol (see the module docstring)."""

    label_bound_is_upper = False

    def __init__(
        self,
        info: ModelInfo,
        *,
        cache_dir: Path,
        device: str = "cpu",
        dtype: Any = None,
        batch_size: int = 16,
        min_shared_prefix: int = 16,
        kv_cache_bytes: int = 512 * 2**20,
        result_cache_bytes: int = 256 * 2**20,
        threads: int | None = None,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from app.engines.gguf import ensure_safetensors

        self.name = info.name
        self.info = info
        self.counters = EngineCounters()
        self.device = torch.device(device)
        self.dtype = dtype if dtype is not None else torch.float32
        self.batch_size = batch_size
        self.pad_slack = PAD_SLACK.get(self.device.type, PAD_SLACK["default"])
        self.min_shared_prefix = min_shared_prefix
        self.cache = ResultCache(result_cache_bytes)
        self._lock = threading.RLock()
        self.kv_store = KVStore(kv_cache_bytes)
        self.threads: int = int(info.options.get("threads") or threads or default_threads())
        """Intra-op CPU threads of every call (fixed: see the module docstring)."""

        if info.source is None:
            raise ValueError(f"model {info.name!r} has no source (hub id, local path or GGUF file)")
        source = str(info.source)
        gguf_file = info.options.get("gguf_file")
        if gguf_file is not None:
            self.model_dir = ensure_safetensors(Path(source) / str(gguf_file), cache_dir)
        elif source.endswith(".gguf"):
            self.model_dir = ensure_safetensors(Path(source), cache_dir)
        else:
            self.model_dir = Path(source) if Path(source).exists() else source  # type: ignore[assignment]
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir))
        model = AutoModelForCausalLM.from_pretrained(str(self.model_dir), dtype=self.dtype)
        # transformers wraps .to() with functools.wraps(Module.to), whose typing loses the bound self
        self.model = model.to(self.device).eval()  # type: ignore[arg-type]
        if self.device.type == "cpu":
            share_weights(self.model, self.model_dir, cache_dir)
        self.vocab_size: int = int(self.model.get_output_embeddings().weight.shape[0])
        self.context_length: int | None = info.context_length or getattr(
            self.model.config, "max_position_embeddings", None
        )
        self.pad_token_id: int = (
            self.tokenizer.pad_token_id
            if self.tokenizer.pad_token_id is not None
            else int(self.tokenizer.eos_token_id or 0)
        )
        eos: set[int] = set()
        for source_ids in (
            getattr(self.model.generation_config, "eos_token_id", None),
            self.tokenizer.eos_token_id,
        ):
            if isinstance(source_ids, int):
                eos.add(source_ids)
            elif source_ids:
                eos.update(int(i) for i in source_ids)
        self.eos_token_ids: frozenset[int] = frozenset(eos)

    # ------------------------------------------------------------------ formatting
    def format_ids(self, prompt: PromptLike) -> Ids:
        """The exact token ids the model reads for `prompt` (template, system, continuation)."""
        return format_prompt_ids(self.tokenizer, self.info.chat, prompt)

    def encode(self, text: str) -> Ids:
        """Token ids of `text` alone, without special tokens (how labels are tokenized)."""
        return tuple(int(i) for i in self.tokenizer(text, add_special_tokens=False).input_ids)

    def decode(self, token_ids: Sequence[int]) -> str:
        """Token ids → text, special tokens skipped."""
        return str(self.tokenizer.decode(list(token_ids), skip_special_tokens=True))  # flat ids: one text

    def runtime(self) -> dict[str, Any]:
        """What a result records about how its scores were computed: engine, device, dtype, threads and
        library versions (the same request and seed on the same runtime give the same bits)."""
        return {
            "engine": "transformers",
            "device": self.device.type,
            "dtype": str(self.dtype).removeprefix("torch."),
            "threads": self.threads if self.device.type == "cpu" else None,
            "versions": runtime_versions(),
        }

    def _pick_threads(self) -> None:
        """Set torch's intra-op threads (process-wide) to this engine's for the coming call (CPU only)."""
        if self.device.type == "cpu":
            import torch

            if torch.get_num_threads() != self.threads:
                torch.set_num_threads(self.threads)

    def _check_length(self, ids: Ids, extra: int = 0) -> None:
        if self.context_length is not None and len(ids) + extra > self.context_length:
            raise PromptTooLong(
                f"prompt of {len(ids) + extra} tokens exceeds the context length {self.context_length} "
                f"of model {self.name!r}"
            )

    # ------------------------------------------------------------------ forward passes
    def _run(self, requests: dict[Ids, tuple[int, bool]]) -> dict[Ids, np.ndarray]:
        """Log-softmax (float64) at the last `keep` positions of each sequence: {seq: (keep, V)}.

        `requests` maps distinct token sequences to (keep, store): row t of the result for `seq` is
        log p(· | seq[: len(seq) − keep + t + 1]); `store` keeps its KV cache for later sequences.
        Sequences run in waves (`next_wave`); each reuses the longest prefix the KV store offers,
        and a wave is cut into batches of similar suffix length (left padding is real compute).
        """
        seqs = list(requests)
        keeps = [requests[s][0] for s in seqs]
        storable = [requests[s][1] and self.kv_store.max_bytes > 0 for s in seqs]
        out: dict[Ids, np.ndarray] = {}
        todo = list(range(len(seqs)))
        while todo:
            caps = [len(seqs[i]) - keeps[i] for i in todo]
            prefixes = [self.kv_store.longest_prefix(seqs[i], cap) for i, cap in zip(todo, caps, strict=True)]
            # the sources are taken (held) now: a batch's stores may evict them before a later batch
            found = [
                (r, self.kv_store.get(key)) if key is not None and r >= self.min_shared_prefix else (0, None)
                for r, key in prefixes
            ]
            wave = next_wave(
                [seqs[i] for i in todo],
                caps,
                [storable[i] for i in todo],
                [r for r, _ in found],
                self.min_shared_prefix,
            )
            rows = [(seqs[todo[w]], keeps[todo[w]], *found[w], storable[todo[w]]) for w in wave]
            for batch in _batches(rows, self.batch_size, self.pad_slack):
                out.update(self._forward(batch))
            done = {todo[w] for w in wave}
            todo = [i for i in todo if i not in done]
        return out

    def _forward(self, rows: Sequence[Row]) -> dict[Ids, np.ndarray]:
        """One batched pass over rows (`Row`): row b feeds seq[reused:] on top of the first `reused`
        positions of its source KV cache.

        Layout per row: [left-padded past | left-padded suffix], padding masked out, explicit position
        ids, so each row equals the sequence run alone (to ~1e-6)."""
        import torch
        from transformers import DynamicCache

        n = len(rows)
        reused = [r for _, _, r, _, _ in rows]
        suffixes = [seq[r:] for seq, _, r, _, _ in rows]
        past_len, width = max(reused), max(len(s) for s in suffixes)
        keep = max(k for _, k, _, _, _ in rows)
        ids = torch.full((n, width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((n, past_len + width), dtype=torch.long)
        for b, (s, r) in enumerate(zip(suffixes, reused, strict=True)):
            ids[b, width - len(s) :] = torch.tensor(s, dtype=torch.long)
            mask[b, past_len - r : past_len] = 1
            mask[b, past_len + width - len(s) :] = 1
        start = torch.tensor(reused, dtype=torch.long)[:, None]
        positions = (start + mask[:, past_len:].cumsum(1) - 1).clamp(min=0)
        past = DynamicCache(config=self.model.config)
        if past_len:
            layers = []
            sources = [src for _, _, _, src, _ in rows]
            for layer in range(len(next(s for s in sources if s is not None))):
                k0, v0 = next(s for s in sources if s is not None)[layer]
                keys = k0.new_zeros((n, k0.shape[1], past_len, k0.shape[3]))
                values = v0.new_zeros((n, v0.shape[1], past_len, v0.shape[3]))
                for b, (src, r) in enumerate(zip(sources, reused, strict=True)):
                    if r:
                        keys[b, :, past_len - r :] = src[layer][0][0, :, :r]
                        values[b, :, past_len - r :] = src[layer][1][0, :, :r]
                layers.append((keys, values))
            past = DynamicCache(ddp_cache_data=layers, config=self.model.config)
        with torch.inference_mode():
            logits = self.model(
                input_ids=ids.to(self.device),
                attention_mask=mask.to(self.device),
                position_ids=positions.to(self.device),
                past_key_values=past,
                use_cache=True,
                logits_to_keep=keep,
            ).logits
        self.counters.forward_passes += 1
        self.counters.prompt_tokens += sum(len(s) for s in suffixes)
        logprobs = torch.log_softmax(logits.to(torch.float64), dim=-1).cpu().numpy()
        result: dict[Ids, np.ndarray] = {}
        for b, (seq, k, r, _, store) in enumerate(rows):
            result[seq] = logprobs[b, keep - k :].copy()
            if store:
                tail = past_len + width - len(suffixes[b])
                kept = slice(past_len - r, past_len)
                cached: list[Any] = past.layers  # a full-attention model's: each layer has keys and values
                self.kv_store.put(
                    seq,
                    [
                        (_row_kv(layer.keys, b, kept, tail), _row_kv(layer.values, b, kept, tail))
                        for layer in cached
                    ],
                )
        return result

    def _next_and_run(
        self, prompt_ids: Sequence[Ids], extra: dict[Ids, tuple[int, bool]]
    ) -> tuple[dict[Ids, np.ndarray], dict[Ids, np.ndarray]]:
        """The next-token log-distribution (float64, V) after each prompt, from the result cache or
        computed, and the `extra` sequences' rows (see `_run`), all in one `_run`."""
        next_dist: dict[Ids, np.ndarray] = {}
        requests: dict[Ids, tuple[int, bool]] = {}
        for ids in dict.fromkeys(prompt_ids):
            hit = self.cache.get((self.name, "next", ids))
            if hit is not None:
                next_dist[ids] = hit
            else:
                self._check_length(ids)
                requests[ids] = (1, True)
        computing = list(requests)
        self.counters.cache_hits += len(prompt_ids) - len(computing)
        for seq, (keep, store) in extra.items():
            old_keep, old_store = requests.get(seq, (0, False))
            requests[seq] = (max(old_keep, keep), old_store or store)
        computed = self._run(requests)
        for ids in computing:
            lp = computed[ids][-1]
            lp.setflags(write=False)
            self.cache.put((self.name, "next", ids), lp)
            next_dist[ids] = lp
        return next_dist, computed

    # ------------------------------------------------------------------ protocol
    def label_logprobs(self, prompts: Sequence[PromptLike], labels: Sequence[str]) -> np.ndarray:
        """log p(label | prompt) for every prompt × label, shape (len(prompts), len(labels)); see module doc.

        One `_run` for everything: the next-token distribution after each prompt (single-token labels
        and the first token of multi-token labels) and, per multi-token label, prompt + label[:-1],
        which reuses the whole prompt's KV cache and so costs len(label) − 1 tokens."""
        label_ids = [self.encode(label) for label in labels]
        for label, lid in zip(labels, label_ids, strict=True):
            if not lid:
                raise ValueError(f"label {label!r} tokenizes to no tokens")
        with self._lock:
            self._pick_threads()
            prompt_ids = [self.format_ids(p) for p in prompts]
            scores = np.empty((len(prompt_ids), len(label_ids)), dtype=np.float64)
            single = [j for j, lid in enumerate(label_ids) if len(lid) == 1]
            todo: dict[tuple[Ids, Ids], list[tuple[int, int]]] = {}
            for i, ids in enumerate(prompt_ids):
                for j, lid in enumerate(label_ids):
                    if len(lid) == 1:
                        continue
                    hit = self.cache.get((self.name, "label", ids, lid))
                    if hit is not None:
                        scores[i, j] = hit
                        self.counters.cache_hits += 1
                    else:
                        todo.setdefault((ids, lid), []).append((i, j))
            extra: dict[Ids, tuple[int, bool]] = {}
            for ids, lid in todo:
                self._check_length(ids + lid[:-1], 1)
                extra[ids + lid[:-1]] = (len(lid) - 1, False)
            needed = prompt_ids if single else list(dict.fromkeys(ids for ids, _ in todo))
            next_dist, computed = self._next_and_run(needed, extra)
            if single:
                first = np.array([label_ids[j][0] for j in single])
                for i, ids in enumerate(prompt_ids):
                    scores[i, single] = next_dist[ids][first]
            for (ids, lid), places in todo.items():
                rest = computed[ids + lid[:-1]][-(len(lid) - 1) :]
                value = float(next_dist[ids][lid[0]] + rest[np.arange(len(lid) - 1), np.array(lid[1:])].sum())
                self.cache.put((self.name, "label", ids, lid), value)
                for i, j in places:
                    scores[i, j] = value
                self.counters.cache_hits += len(places) - 1
        return scores

    def next_token_logprobs(
        self, prompts: Sequence[PromptLike], top_k: int | Literal["all"] = "all"
    ) -> list[TokenDistribution]:
        """The next-token log-distribution after each prompt: full vocabulary or its top k."""
        with self._lock:
            self._pick_threads()
            all_ids = [self.format_ids(p) for p in prompts]
            next_dist, _ = self._next_and_run(all_ids, {})
            dists = [next_dist[ids] for ids in all_ids]
        if top_k == "all":
            return [TokenDistribution(logprobs=d) for d in dists]
        k = int(top_k)
        if not 1 <= k <= self.vocab_size:
            raise ValueError(f"top_k must be in [1, {self.vocab_size}] or 'all', got {top_k}")

        def token_text(ids: list[int]) -> str:  # special tokens shown as themselves
            return str(self.tokenizer.decode(ids))

        return [top_k_distribution(d, k, token_text) for d in dists]

    def generate(self, prompts: Sequence[PromptLike], sampling: Sampling) -> list[list[Generation]]:
        """`n` samples per prompt (temperature 0 = greedy), each with its tokens' raw logprobs."""
        s = sampling
        if s.max_new_tokens < 1 or s.n < 1:
            raise ValueError("max_new_tokens and n must be ≥ 1")
        if s.temperature < 0 or not 0 < s.top_p <= 1:
            raise ValueError("temperature must be ≥ 0 and top_p in (0, 1]")
        params = (s.max_new_tokens, float(s.temperature), float(s.top_p), int(s.seed), int(s.n))
        with self._lock:
            self._pick_threads()
            prompt_ids = [self.format_ids(p) for p in prompts]
            result: list[list[Generation] | None] = [None] * len(prompt_ids)
            todo: dict[Ids, list[int]] = {}
            for i, ids in enumerate(prompt_ids):
                hit = self.cache.get((self.name, "generate", ids, params))
                if hit is not None:
                    result[i] = list(hit)
                    self.counters.cache_hits += 1
                else:
                    todo.setdefault(ids, []).append(i)
            rows = [(ids, j) for ids in todo for j in range(s.n)]
            samples: dict[Ids, list[Generation]] = {ids: [] for ids in todo}
            for start in range(0, len(rows), self.batch_size):
                batch = rows[start : start + self.batch_size]
                gens = self._sample(batch, s.max_new_tokens, s.temperature, s.top_p, s.seed)
                for (ids, _), gen in zip(batch, gens, strict=True):
                    samples[ids].append(gen)
            for ids, indices in todo.items():
                self.cache.put((self.name, "generate", ids, params), tuple(samples[ids]))
                for i in indices:
                    result[i] = list(samples[ids])
                self.counters.cache_hits += len(indices) - 1
        return result  # type: ignore[return-value]

    def _sample(
        self,
        rows: Sequence[tuple[Ids, int]],
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        seed: int,
    ) -> list[Generation]:
        import torch
        from transformers import DynamicCache

        for ids, _ in rows:
            self._check_length(ids, max_new_tokens)
        batch = len(rows)
        generators = [torch.Generator().manual_seed(_ids_seed(seed, j, ids)) for ids, j in rows]
        tokens: list[list[int]] = [[] for _ in rows]
        logps: list[list[float]] = [[] for _ in rows]
        finished = [False] * batch
        prefilled = self._prefill(rows)
        if prefilled is not None:  # the prompts ran once each, on top of their longest cached prefixes
            raw, past, mask, step_pos = prefilled
        else:  # the whole prompts are fed in the first step
            width = max(len(ids) for ids, _ in rows)
            step_ids = torch.full((batch, width), self.pad_token_id, dtype=torch.long)
            mask = torch.zeros((batch, width), dtype=torch.long)
            for b, (ids, _) in enumerate(rows):
                step_ids[b, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
                mask[b, width - len(ids) :] = 1
            step_pos = (mask.cumsum(1) - 1).clamp(min=0)
            past = DynamicCache()
            self.counters.prompt_tokens += int(mask.sum())
        for step in range(max_new_tokens):
            if step or prefilled is None:
                with torch.inference_mode():
                    logits = self.model(
                        input_ids=step_ids.to(self.device),
                        attention_mask=mask.to(self.device),
                        position_ids=step_pos.to(self.device),
                        past_key_values=past,
                        use_cache=True,
                        logits_to_keep=1,
                    ).logits[:, -1, :]
                self.counters.forward_passes += 1
                raw = torch.log_softmax(logits.to(torch.float64), dim=-1).cpu()
            chosen = torch.full((batch,), self.pad_token_id, dtype=torch.long)
            for b in range(batch):
                if finished[b]:
                    continue
                tok = self._choose(raw[b], temperature, top_p, generators[b])
                chosen[b] = tok
                if tok in self.eos_token_ids:
                    finished[b] = True
                    continue
                tokens[b].append(tok)
                logps[b].append(float(raw[b, tok]))
                self.counters.generated_tokens += 1
            if all(finished):
                break
            step_ids = chosen[:, None]
            step_pos = step_pos[:, -1:] + 1
            mask = torch.cat([mask, torch.ones((batch, 1), dtype=torch.long)], dim=1)
        return [
            Generation(text=self.decode(t), token_ids=tuple(t), token_logprobs=tuple(lp))
            for t, lp in zip(tokens, logps, strict=True)
        ]

    def _prefill(self, rows: Sequence[tuple[Ids, int]]) -> tuple[Any, Any, Any, Any] | None:
        """The first decoding step of `rows` from the prefix KV store: each distinct prompt runs once
        (`_run`: only the tokens past its longest cached prefix are fed, and its KV cache is kept), then
        the rows' caches are laid out left-padded as the step-by-step loop continues them.

        → (first-token log-probabilities (batch, V), cache, attention mask, next positions), or None
        when the store keeps nothing or evicted a prompt before its rows were laid out (the caller then
        feeds whole prompts)."""
        import torch
        from transformers import DynamicCache

        if self.kv_store.max_bytes <= 0:
            return None
        prompts = list(dict.fromkeys(ids for ids, _ in rows))
        first = self._run({ids: (1, True) for ids in prompts})
        if not all(ids in self.kv_store for ids in prompts):
            return None
        sources = {ids: self.kv_store.get(ids) for ids in prompts}
        batch, past_len = len(rows), max(len(ids) for ids in prompts)
        mask = torch.zeros((batch, past_len), dtype=torch.long)
        for b, (ids, _) in enumerate(rows):
            mask[b, past_len - len(ids) :] = 1
        layers = []
        for layer in range(len(sources[prompts[0]])):
            k0, v0 = sources[prompts[0]][layer]
            keys = k0.new_zeros((batch, k0.shape[1], past_len, k0.shape[3]))
            values = v0.new_zeros((batch, v0.shape[1], past_len, v0.shape[3]))
            for b, (ids, _) in enumerate(rows):
                keys[b, :, past_len - len(ids) :] = sources[ids][layer][0][0]
                values[b, :, past_len - len(ids) :] = sources[ids][layer][1][0]
            layers.append((keys, values))
        past = DynamicCache(ddp_cache_data=layers, config=self.model.config)
        raw = torch.from_numpy(np.stack([first[ids][-1] for ids, _ in rows]))
        positions = torch.tensor([[len(ids) - 1] for ids, _ in rows], dtype=torch.long)
        return raw, past, mask, positions

    @staticmethod
    def _choose(logprobs: Any, temperature: float, top_p: float, generator: Any) -> int:
        import torch

        if temperature == 0:
            return int(torch.argmax(logprobs))
        probs = torch.softmax(logprobs / temperature, dim=-1)
        if top_p < 1.0:
            sorted_p, sorted_idx = torch.sort(probs, descending=True)
            keep = (sorted_p.cumsum(0) - sorted_p) < top_p  # smallest set whose mass reaches top_p
            filtered = torch.zeros_like(probs)
            filtered[sorted_idx[keep]] = sorted_p[keep]
            probs = filtered / filtered.sum()
        return int(torch.multinomial(probs, 1, generator=generator))
