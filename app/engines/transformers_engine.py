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
- batches of `batch_size` sequences, left padding with explicit position ids (so a batched row
  equals the same prompt alone to ~1e-6), `logits_to_keep` = the positions needed only (1 for
  next-token questions), so the vocabulary projection runs on one position, not the whole prompt;
- **shared-prefix KV reuse**: within a call, sequences are sorted lexicographically by token ids
  and batched; when the sequences of a batch share a common token prefix of at least
  `min_shared_prefix` tokens (the chat header, the instruction and the demonstrations common to
  all partitions or leave-one-out contexts; the context common to all candidate next tokens in DP
  synthetic generation), that prefix is run once, its KV cache is repeated across the batch, and
  only the differing suffixes are computed. Recent prefixes' KV caches are kept (`prefix_cache_size`)
  so repeated calls over the same context (ICLInf over many targets) skip the prefix entirely.
  To use it, just pass all prompts that share a context in ONE call, e.g.
  `engine.next_token_logprobs([Prompt(ctx + q) for q in queries], top_k="all")`;
- a result cache keyed by (model, operation, exact token ids, parameters): a repeated question is
  answered without any forward pass (`counters.cache_hits`).

Counters: `forward_passes` counts model invocations (one batched call = one pass), `prompt_tokens`
the non-padding tokens actually fed to the model (so prefix reuse and cache hits lower it),
`generated_tokens` the sampled tokens.

Determinism: scoring is deterministic. `generate` draws row j of prompt p from its own torch
Generator seeded by numpy `SeedSequence([seed, j, *hash(token ids of p)])`, so the same seed gives the
same samples whatever the batch it was sent in (up to float ties). Reported token logprobs are
the model's raw log-probabilities (temperature 1, before top-p), like vLLM's and OpenAI's. The end
of sequence token stops a row and is not included in its text or token ids.
"""

from __future__ import annotations

import copy
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from app.engines.cache import ResultCache
from app.engines.protocol import EngineCounters, Generation, ModelInfo, Prompt, PromptLike, TokenDistribution

Ids = tuple[int, ...]


class PromptTooLong(ValueError):
    """A formatted prompt (plus what must be scored after it) exceeds the model's context length."""


def as_prompt(prompt: PromptLike) -> Prompt:
    return Prompt(prompt) if isinstance(prompt, str) else prompt


def common_prefix_len(rows: Sequence[Ids]) -> int:
    """Length of the longest common prefix of token sequences."""
    if not rows:
        return 0
    shortest = min(len(r) for r in rows)
    first = rows[0]
    for i in range(shortest):
        tok = first[i]
        if any(r[i] != tok for r in rows):
            return i
    return shortest


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
        prefix_cache_size: int = 4,
        result_cache_bytes: int = 256 * 2**20,
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
        self.min_shared_prefix = min_shared_prefix
        self.prefix_cache_size = prefix_cache_size
        self.cache = ResultCache(result_cache_bytes)
        self._lock = threading.RLock()
        self._prefix_kv: OrderedDict[Ids, Any] = OrderedDict()

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
        self.model = model.to(self.device).eval()
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
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)

    def _check_length(self, ids: Ids, extra: int = 0) -> None:
        if self.context_length is not None and len(ids) + extra > self.context_length:
            raise PromptTooLong(
                f"prompt of {len(ids) + extra} tokens exceeds the context length {self.context_length} "
                f"of model {self.name!r}"
            )

    # ------------------------------------------------------------------ forward passes
    def _prefix_cache(self, prefix: Ids) -> Any:
        """The KV cache after `prefix` (batch 1), computed once and kept for recent prefixes."""
        import torch
        from transformers import DynamicCache

        kv = self._prefix_kv.get(prefix)
        if kv is not None:
            self._prefix_kv.move_to_end(prefix)
            return kv
        kv = DynamicCache()
        ids = torch.tensor([prefix], dtype=torch.long, device=self.device)
        with torch.inference_mode():
            self.model(input_ids=ids, past_key_values=kv, use_cache=True, logits_to_keep=1)
        self.counters.forward_passes += 1
        self.counters.prompt_tokens += len(prefix)
        self._prefix_kv[prefix] = kv
        while len(self._prefix_kv) > self.prefix_cache_size:
            self._prefix_kv.popitem(last=False)
        return kv

    def _tail_logprobs(self, seqs: Sequence[Ids], keep: int) -> list[np.ndarray]:
        """Log-softmax (float64) at the last `keep` positions of each sequence: arrays (keep, V).

        Row t of the result for sequence s is log p(· | s[: len(s) - keep + t + 1]).
        """
        import torch

        out: list[np.ndarray | None] = [None] * len(seqs)
        order = sorted(range(len(seqs)), key=lambda i: seqs[i])
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            rows = [seqs[i] for i in chunk]
            shared = min(common_prefix_len(rows), min(len(r) for r in rows) - keep)
            use_prefix = shared >= self.min_shared_prefix and (
                len(rows) > 1 or rows[0][:shared] in self._prefix_kv
            )
            offset = shared if use_prefix else 0
            suffixes = [r[offset:] for r in rows]
            width = max(len(s) for s in suffixes)
            ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for b, s in enumerate(suffixes):
                ids[b, width - len(s) :] = torch.tensor(s, dtype=torch.long)
                mask[b, width - len(s) :] = 1
            positions = (offset + mask.cumsum(1) - 1).clamp(min=0)
            kwargs: dict[str, Any] = {}
            if use_prefix:
                past = copy.deepcopy(self._prefix_cache(rows[0][:offset]))
                if len(rows) > 1:
                    past.batch_repeat_interleave(len(rows))
                mask = torch.cat([torch.ones((len(rows), offset), dtype=torch.long), mask], dim=1)
                kwargs = {"past_key_values": past, "use_cache": True}
            else:
                kwargs = {"use_cache": False}
            with torch.inference_mode():
                logits = self.model(
                    input_ids=ids.to(self.device),
                    attention_mask=mask.to(self.device),
                    position_ids=positions.to(self.device),
                    logits_to_keep=keep,
                    **kwargs,
                ).logits
            self.counters.forward_passes += 1
            self.counters.prompt_tokens += sum(len(s) for s in suffixes)
            logprobs = torch.log_softmax(logits[:, -keep:, :].to(torch.float64), dim=-1).cpu().numpy()
            for b, i in enumerate(chunk):
                out[i] = logprobs[b]
        return out  # type: ignore[return-value]

    def _next_distributions(self, all_ids: Sequence[Ids]) -> list[np.ndarray]:
        """Full next-token log-distributions (float64, V) for token sequences, through the result cache."""
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
            for ids in keys:
                self._check_length(ids)
            for ids, lp in zip(keys, self._tail_logprobs(keys, keep=1), strict=True):
                lp = lp[0]
                lp.setflags(write=False)
                self.cache.put((self.name, "next", ids), lp)
                for i in missing[ids]:
                    result[i] = lp
            self.counters.cache_hits += sum(len(v) - 1 for v in missing.values())
        return result  # type: ignore[return-value]

    # ------------------------------------------------------------------ protocol
    def label_logprobs(self, prompts: Sequence[PromptLike], labels: Sequence[str]) -> np.ndarray:
        """log p(label | prompt) for every prompt × label, shape (len(prompts), len(labels)); see module doc."""
        label_ids = [self.encode(label) for label in labels]
        for label, lid in zip(labels, label_ids, strict=True):
            if not lid:
                raise ValueError(f"label {label!r} tokenizes to no tokens")
        with self._lock:
            prompt_ids = [self.format_ids(p) for p in prompts]
            scores = np.empty((len(prompt_ids), len(label_ids)), dtype=np.float64)
            single = [j for j, lid in enumerate(label_ids) if len(lid) == 1]
            if single:
                dists = self._next_distributions(prompt_ids)
                first = np.array([label_ids[j][0] for j in single])
                for i, dist in enumerate(dists):
                    scores[i, single] = dist[first]
            multi = [j for j, lid in enumerate(label_ids) if len(lid) > 1]
            todo: dict[tuple[Ids, Ids], list[tuple[int, int]]] = {}
            for i, ids in enumerate(prompt_ids):
                for j in multi:
                    key = (ids, label_ids[j])
                    hit = self.cache.get((self.name, "label", *key))
                    if hit is not None:
                        scores[i, j] = hit
                        self.counters.cache_hits += 1
                    else:
                        todo.setdefault(key, []).append((i, j))
            if todo:
                keep = max(len(lid) for _, lid in todo)
                seqs = [ids + lid[:-1] for ids, lid in todo]
                for seq in seqs:
                    self._check_length(seq, 1)
                tails = self._tail_logprobs(seqs, keep=keep)
                for (ids, lid), tail in zip(todo, tails, strict=True):
                    rows = tail[keep - len(lid) :]
                    value = float(rows[np.arange(len(lid)), np.array(lid)].sum())
                    self.cache.put((self.name, "label", ids, lid), value)
                    for i, j in todo[(ids, lid)]:
                        scores[i, j] = value
                self.counters.cache_hits += sum(len(v) - 1 for v in todo.values())
        return scores

    def next_token_logprobs(
        self, prompts: Sequence[PromptLike], top_k: int | Literal["all"] = "all"
    ) -> list[TokenDistribution]:
        """The next-token log-distribution after each prompt: full vocabulary or its top k."""
        with self._lock:
            dists = self._next_distributions([self.format_ids(p) for p in prompts])
        if top_k == "all":
            return [TokenDistribution(logprobs=d) for d in dists]
        k = int(top_k)
        if not 1 <= k <= self.vocab_size:
            raise ValueError(f"top_k must be in [1, {self.vocab_size}] or 'all', got {top_k}")
        result = []
        for d in dists:
            idx = np.argpartition(-d, k - 1)[:k]
            idx = idx[np.argsort(-d[idx], kind="stable")]
            tokens = tuple(self.tokenizer.decode([int(t)]) for t in idx)
            result.append(
                TokenDistribution(logprobs=d[idx], token_ids=idx, tokens=tokens, floor=float(d[idx[-1]]))
            )
        return result

    def generate(
        self,
        prompts: Sequence[PromptLike],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int = 0,
        n: int = 1,
    ) -> list[list[Generation]]:
        """`n` samples per prompt (temperature 0 = greedy), each with its tokens' raw logprobs."""
        if max_new_tokens < 1 or n < 1:
            raise ValueError("max_new_tokens and n must be ≥ 1")
        if temperature < 0 or not 0 < top_p <= 1:
            raise ValueError("temperature must be ≥ 0 and top_p in (0, 1]")
        params = (max_new_tokens, float(temperature), float(top_p), int(seed), int(n))
        with self._lock:
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
            rows = [(ids, j) for ids in todo for j in range(n)]
            samples: dict[Ids, list[Generation]] = {ids: [] for ids in todo}
            for start in range(0, len(rows), self.batch_size):
                batch = rows[start : start + self.batch_size]
                gens = self._sample(batch, max_new_tokens, temperature, top_p, seed)
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
        width = max(len(ids) for ids, _ in rows)
        batch = len(rows)
        input_ids = torch.full((batch, width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((batch, width), dtype=torch.long)
        for b, (ids, _) in enumerate(rows):
            input_ids[b, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            mask[b, width - len(ids) :] = 1
        positions = (mask.cumsum(1) - 1).clamp(min=0)
        generators = [torch.Generator().manual_seed(_ids_seed(seed, j, ids)) for ids, j in rows]
        past = DynamicCache()
        tokens: list[list[int]] = [[] for _ in rows]
        logps: list[list[float]] = [[] for _ in rows]
        finished = [False] * batch
        self.counters.prompt_tokens += int(mask.sum())
        step_ids, step_pos = input_ids, positions
        for _ in range(max_new_tokens):
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
