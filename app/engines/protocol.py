"""The engine protocol: what an audit may ask of a language model and of an embedder.

Pure typing; implementations (transformers, vllm, openai, oracle) import their heavy libraries
inside their own modules, only when selected.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class Prompt:
    """One model input.

    `text` is the user content; the engine wraps it in the model's chat template when the registry
    entry says the model is a chat model, or uses it raw for a base model. `system` is an optional
    system message (prompt defenses). `continuation` are token ids already produced after the
    prompt (the assistant's partial answer), e.g. the tokens generated so far in DP synthetic
    generation.
    """

    text: str
    system: str | None = None
    continuation: tuple[int, ...] = ()


PromptLike = str | Prompt


@dataclass(frozen=True)
class TokenDistribution:
    """A next-token distribution: full vocabulary (`token_ids is None`, `logprobs` has length V)
    or its top k (`token_ids`, `logprobs` sorted descending, `tokens` their strings).

    For top-k results from APIs, `floor` is the k-th logprob: every token not listed has logprob ≤ floor.
    """

    logprobs: np.ndarray
    token_ids: np.ndarray | None = None
    tokens: tuple[str, ...] | None = None
    floor: float | None = None


def top_k_distribution(logprobs: np.ndarray, k: int, decode: Callable[[list[int]], str]) -> TokenDistribution:
    """The k most likely tokens of a full next-token log-distribution, descending (ties by token id),
    with `floor` = the k-th logprob."""
    idx = np.argpartition(-logprobs, k - 1)[:k]
    idx = idx[np.lexsort((idx, -logprobs[idx]))]
    tokens = tuple(decode([int(t)]) for t in idx)
    return TokenDistribution(
        logprobs=logprobs[idx], token_ids=idx, tokens=tokens, floor=float(logprobs[idx[-1]])
    )


@dataclass(frozen=True)
class Sampling:
    """How `generate` samples: up to `max_new_tokens` tokens, `n` samples per prompt, temperature 0
    = greedy, nucleus `top_p`, and `seed` for engines that can repeat their draws."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    n: int = 1


@dataclass(frozen=True)
class Generation:
    text: str
    token_ids: tuple[int, ...]
    token_logprobs: tuple[float, ...]


@dataclass
class EngineCounters:
    """Cost counters every engine keeps; audits report them."""

    forward_passes: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    cache_hits: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "forward_passes": self.forward_passes,
            "prompt_tokens": self.prompt_tokens,
            "generated_tokens": self.generated_tokens,
            "cache_hits": self.cache_hits,
        }


@runtime_checkable
class LLMEngine(Protocol):
    name: str
    counters: EngineCounters

    def label_logprobs(self, prompts: Sequence[PromptLike], labels: Sequence[str]) -> np.ndarray:
        """Log-probability of each label string as the next output, shape (len(prompts), len(labels)).

        Multi-token labels are scored as the whole sequence (sum of token logprobs). Not renormalized:
        the caller renormalizes over the label set; the missing mass is what falls outside it.
        Engines that only see a top-k list return a bound; they say so in `label_bound_is_upper`.
        """
        ...

    def next_token_logprobs(
        self, prompts: Sequence[PromptLike], top_k: int | Literal["all"] = "all"
    ) -> list[TokenDistribution]:
        """The next-token log-distribution after each prompt (full vocabulary or top k)."""
        ...

    def generate(self, prompts: Sequence[PromptLike], sampling: Sampling) -> list[list[Generation]]:
        """`sampling.n` sampled continuations per prompt, with their token logprobs."""
        ...

    def decode(self, token_ids: Sequence[int]) -> str:
        """Token ids → text (for engines that expose a tokenizer)."""
        ...


@runtime_checkable
class Embedder(Protocol):
    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-normalized embeddings, shape (len(texts), d), float32."""
        ...


@dataclass(frozen=True)
class ModelInfo:
    """A model registry entry (GET /v1/models)."""

    name: str
    engine: str  # "transformers" | "vllm" | "openai" | "oracle"
    chat: bool
    context_length: int | None = None
    source: str | None = None  # hub id, local path, GGUF file or base URL
    options: dict[str, Any] = field(default_factory=dict)  # the registry file's values, read per engine
