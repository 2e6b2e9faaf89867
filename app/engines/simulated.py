"""The `simulated` engine — NOT a language model: random label distributions for soundness tests.

It answers the same membership-audit queries as the oracle (Inquiry, signal texts, ContextLeak
"1"/"0" and list prompts; `app.engines.oracle`), but stochastically: a prompt's probability of each
label is a Dirichlet(α·1_K) draw seeded by (engine seed, query kind, canary text, number of exemplars
in the prompt's context). The canary then either

- changes nothing (`shift = 0`, the null: the canary's partition votes from the same distribution with
  or without the canary), or
- moves its partition's distribution towards the "canary present" answer: p ↦ (1 − s)·p + s·e_present
  (`shift = s`; s = 1 is the oracle).

Why the key holds no exemplar text: a null needs the canary's partition to vote alike in C1 and C0,
which differ in exactly one exemplar (the canary replaces x), and any function of the exemplar set that
is unchanged by replacing one exemplar is constant over all sets of that size. So partitions of equal
size share one random distribution per audit (partition sizes vary under disjoint-Poisson partitioning),
and the randomness across audits comes from the seed and the canary. Votes are then T i.i.d. draws:
exactly the stochastic clean statistic whose pool sampling error the soundness tests probe.

`valid = v` ∈ (0, 1] (default 1) stands in for a small model that often answers outside the label set: a
partition casts a valid vote with probability v (p ↦ v·p, the rest an invalid vote) before the shift, so
with s = 1 the canary's partition votes "present" and, without the canary, mostly votes nothing — the case
in which only one count moves and the Ṽ_y+ score is the better white-box test (attacks/count_score.py).

Name the model `simulated` (null, α = 1, seed 0) or with parameters, `simulated:shift=0.2,alpha=0.5,
seed=3,valid=0.2`; a models-file entry `{name: x, engine: simulated, shift: 0.2}` works too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from app.audit.icl import prompts as texts
from app.engines.oracle import _PATTERNS, OracleRefusal, _normal
from app.engines.protocol import EngineCounters, Generation, ModelInfo, Prompt, PromptLike, TokenDistribution

if TYPE_CHECKING:
    from app.engines.protocol import Sampling

PREFIX = "simulated"


@dataclass(frozen=True)
class SimulatedParams:
    """shift s ∈ [0, 1] (0 = null), Dirichlet concentration α > 0, engine seed, valid-vote mass v ∈ (0, 1]."""

    shift: float = 0.0
    alpha: float = 1.0
    seed: int = 0
    valid: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.shift <= 1.0:
            raise ValueError(f"simulated engine: shift must be in [0, 1], got {self.shift}")
        if not self.alpha > 0:
            raise ValueError(f"simulated engine: alpha must be > 0, got {self.alpha}")
        if not 0.0 < self.valid <= 1.0:
            raise ValueError(f"simulated engine: valid must be in (0, 1], got {self.valid}")


def is_simulated_name(name: str) -> bool:
    return name == PREFIX or name.startswith(PREFIX + ":")


def parse_simulated_name(name: str) -> SimulatedParams:
    """`simulated` or `simulated:shift=0.2,alpha=1,seed=3` → parameters (ValueError naming the bad part)."""
    if not is_simulated_name(name):
        raise ValueError(f"not a simulated engine name: {name!r}")
    values: dict[str, Any] = {}  # keyword arguments of SimulatedParams
    spec = name[len(PREFIX) + 1 :]
    for part in filter(None, spec.split(",")):
        key, _, value = part.partition("=")
        key = key.strip()
        try:
            if key == "seed":
                values[key] = int(value)
            elif key in ("shift", "alpha", "valid"):
                values[key] = float(value)
            else:
                raise ValueError(f"unknown parameter {key!r} (shift, alpha, seed, valid)")
        except ValueError as exc:
            raise ValueError(f"simulated engine name {name!r}: {exc}") from exc
    return SimulatedParams(**values)


def params_from_options(options: dict) -> SimulatedParams:
    """A models-file entry's options (shift, alpha, seed, valid) → parameters."""
    return SimulatedParams(
        shift=float(options.get("shift", 0.0)),
        alpha=float(options.get("alpha", 1.0)),
        seed=int(options.get("seed", 0)),
        valid=float(options.get("valid", 1.0)),
    )


def _n_exemplars(context: str) -> int:
    return sum(1 for line in context.splitlines() if line.startswith("Text: "))


class SimulatedEngine:
    """Seeded random answerer of audit queries; see the module docstring. Deterministic per prompt."""

    def __init__(self, info: ModelInfo | None = None, params: SimulatedParams | None = None) -> None:
        self.info = info or ModelInfo(name=PREFIX, engine="simulated", chat=False)
        self.name = self.info.name
        self.params = params or SimulatedParams()
        self.counters = EngineCounters()

    def parse(self, prompt: PromptLike) -> tuple[str, str, bool, str, int]:
        """(query kind, canary text, canary present in the context, the "present" answer, exemplars)."""
        p = prompt if isinstance(prompt, Prompt) else Prompt(prompt)
        for kind, pattern in _PATTERNS.items():
            m = pattern.fullmatch(p.text)
            if m is None or kind == "repeat":
                continue
            fields = m.groupdict()
            canary = fields["canary"].strip()
            context = (p.system or "") if kind in ("canary_binary", "canary_list") else fields["context"]
            present = bool(canary) and _normal(canary) in _normal(context)
            if kind == "inquiry":
                yes = texts.INQUIRY_ANSWERS[0]
            elif kind == "canary_binary":
                yes = texts.CANARY_BINARY_ANSWERS[0]
            elif kind == "canary_list":
                yes = texts.canary_list_answers(canary)[0]
            else:
                yes = fields["y1"]
            return kind, canary, present, yes, _n_exemplars(context)
        raise OracleRefusal(
            "the simulated engine answers only the membership-audit queries (Inquiry, signal texts, "
            "ContextLeak canary prompts); it is not a language model. Refused prompt starting "
            f"{p.text[:80]!r}"
        )

    def label_probs(self, prompt: PromptLike, labels: Sequence[str]) -> np.ndarray:
        """P(label) for one prompt (K,): the seeded Dirichlet draw times the valid-vote mass v (1 − Σ = an
        invalid vote), shifted towards "present" if the canary is in the context."""
        kind, canary, present, yes, n_exemplars = self.parse(prompt)
        key = f"{kind}\x00{canary}\x00{n_exemplars}\x00{len(labels)}".encode()
        digest = int.from_bytes(hashlib.sha256(key).digest()[:8], "little")
        rng = np.random.default_rng([self.params.seed, digest])
        probs = self.params.valid * rng.dirichlet(np.full(len(labels), self.params.alpha))
        normal_labels = [_normal(label) for label in labels]
        if present and self.params.shift > 0 and _normal(yes) in normal_labels:
            probs = (1.0 - self.params.shift) * probs
            probs[normal_labels.index(_normal(yes))] += self.params.shift
        return probs

    def label_logprobs(self, prompts: Sequence[PromptLike], labels: Sequence[str]) -> np.ndarray:
        with np.errstate(divide="ignore"):
            out = np.log(np.stack([self.label_probs(p, labels) for p in prompts]))
        self.counters.forward_passes += len(prompts)
        return out

    def generate(self, prompts: Sequence[PromptLike], sampling: Sampling) -> list[list[Generation]]:
        raise OracleRefusal(
            "the simulated engine scores labels only (label_logprobs); it does not generate text"
        )

    def next_token_logprobs(
        self, prompts: Sequence[PromptLike], top_k: int | Literal["all"] = "all"
    ) -> list[TokenDistribution]:
        raise OracleRefusal("the simulated engine has no vocabulary; it is not a language model")

    def decode(self, token_ids: Sequence[int]) -> str:
        raise OracleRefusal("the simulated engine has no tokenizer; it is not a language model")
