"""What every DP-ICL mechanism exposes to the membership audit.

A mechanism separates its **clean statistic** (per-call vote vectors or mean embeddings, collected
once from the engine) from its **private release** (noise + selection), vectorized over a batch of
calls, so the bootstrap (003 Alg. 1) re-draws only the noise, through the mechanism's own code.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from app.audit.icl.contexts import PARTITIONERS, NeighbouringContexts, holds
from app.audit.mechanisms.decoding import (
    label_distribution,
    label_prefixes,
    longest_match,
    sequence_logprobs,
)
from app.audit.runtime import AuditError
from app.datasets.types import Example
from app.engines.protocol import Embedder, LLMEngine, Prompt, Sampling

if TYPE_CHECKING:
    from collections.abc import Callable

    from app.audit.attacks.base import AuditQuery
    from app.audit.budget import Meter
    from app.audit.runtime import ResponseStore
    from app.egress import AllowList


@dataclass(frozen=True)
class Release:
    """A batch of m private outputs: the released answer's index and the white-box view.

    `answer` (m,) indexes the label set (voting) or the candidates (ESA); −1 = no valid answer.
    `white_box` (m, K) noisy votes or (m, d) noisy mean embedding.
    """

    answer: np.ndarray
    white_box: np.ndarray


@dataclass(frozen=True)
class BinaryTarget:
    """What "canary present" means for the attack: a label index, or a pair of signal embeddings.

    Votes: `positive` vs `negative` (None = the strongest other label).
    Embeddings: `present` = emb(y1), `absent` = emb(y0) (003 §3.4); `view` and `reference` as in
    `AuditQuery` (ESA's scoring, and 002 App. D's reference vector).
    """

    positive: int = 0
    negative: int | None = 1
    present: np.ndarray | None = None
    absent: np.ndarray | None = None
    view: str = "signal"
    reference: np.ndarray | None = None


@dataclass(frozen=True)
class Theory:
    """The claimed guarantee and what the calibrated noise really gives on the GDP scale.

    μ_theory = Δ₂/σ (Gaussian mechanism); `epsilon_ceiling` = ε(μ_theory) at δ, the exact ε at δ of the
    calibrated noise — what a perfect attack with infinitely many trials reaches. For `analytic` σ it is
    the claim; for `classic` σ it is below the claim only up to ε ≈ 8.42 at δ = 1e-5 (≈ 7.46 at 1e-3) and
    above it beyond (ε = 10 → 10.39): `calibration_valid` is False there, a theory-level breach reported
    apart from the empirical verdict. A bare claim (σ unknown) has no exact ε: both are None.
    """

    epsilon: float
    delta: float
    sigma: float | None  # None: unknown (a deployed endpoint's claim)
    sensitivity: float | None
    mu: float
    epsilon_ceiling: float
    calibration: str

    @property
    def epsilon_exact_at_delta(self) -> float | None:
        """The exact ε at δ of the calibrated σ (= `epsilon_ceiling`); None for a bare claim."""
        return None if self.sigma is None else self.epsilon_ceiling

    @property
    def calibration_valid(self) -> bool | None:
        """Whether σ really gives (ε, δ)-DP (accounting/gaussian.py's check); None for a bare claim."""
        if self.sigma is None or self.sensitivity is None:
            return None
        from app.audit.accounting.gaussian import calibration_check

        return calibration_check(self.epsilon, self.delta, self.sigma, self.sensitivity)[0]

    def as_dict(self) -> dict[str, float | str | bool | None]:
        return {
            "epsilon_theory": self.epsilon,
            "mu_theory": self.mu,
            "epsilon_ceiling": self.epsilon_ceiling,
            "epsilon_exact_at_delta": self.epsilon_exact_at_delta,
            "calibration_valid": self.calibration_valid,
            "sigma": self.sigma,
            "sensitivity": self.sensitivity,
            "calibration": self.calibration,
        }


def calibrate(epsilon: float, delta: float, sensitivity: float, calibration: str) -> Theory:
    """σ for (ε, δ) at L2 sensitivity Δ₂: classic σ = Δ₂√(2 ln(1.25/δ))/ε (003 Alg. 2 l.7 with Δ₂ = √2),
    or the analytic Gaussian mechanism (Balle & Wang 2018). Classic is accepted at every ε (deployments use
    it); `Theory.calibration_valid` says where it does not keep its claim."""
    from app.audit.accounting.gaussian import analytic_sigma, classic_sigma, gaussian_mu
    from app.audit.accounting.gdp import epsilon_for_mu

    if calibration == "classic":
        sigma = classic_sigma(epsilon, delta, sensitivity)
    elif calibration == "analytic":
        sigma = analytic_sigma(epsilon, delta, sensitivity)
    else:
        raise AuditError(f"unknown calibration {calibration!r} (classic or analytic)")
    mu = gaussian_mu(sensitivity, sigma)
    return Theory(
        epsilon, delta, float(sigma), sensitivity, float(mu), float(epsilon_for_mu(mu, delta)), calibration
    )


def claimed_theory(epsilon: float, delta: float) -> Theory:
    """A black-box system's bare claim: its noise is unknown, so μ_theory = μ(ε, δ), the GDP μ whose
    curve passes through the claimed (ε, δ), and the ceiling is the claim itself."""
    from app.audit.accounting.gdp import mu_for_epsilon

    return Theory(epsilon, delta, None, None, mu_for_epsilon(epsilon, delta), epsilon, "claimed")


def draw_votes(label_probs: np.ndarray, n_calls: int, rng: np.random.Generator) -> np.ndarray:
    """`n_calls` clean vote vectors (n_calls, K): each of the T partitions votes once from its row of
    `label_probs` (T, K), or casts no vote with the missing mass (003 Alg. 2 lines 3–6)."""
    n_parts, n_labels = label_probs.shape
    cdf = np.cumsum(np.concatenate([label_probs, 1.0 - label_probs.sum(1, keepdims=True)], axis=1), axis=1)
    cdf[:, -1] = 1.0
    u = rng.random((n_calls, n_parts))
    choice = (u[:, :, None] >= cdf[None, :, :]).sum(axis=2)  # 0…K, K = invalid
    cells = (np.arange(n_calls)[:, None] * (n_labels + 1) + choice).ravel()
    votes = np.bincount(cells, minlength=n_calls * (n_labels + 1)).reshape(n_calls, n_labels + 1)
    return votes[:, :n_labels].astype(np.float64)


class CleanSource:
    """The engine and embedder an audit collects from, memoized by prompt so the forward passes equal
    the number of distinct prompts; `distinct_prompts` counts what was actually sent."""

    def __init__(self, llm: LLMEngine | None, embedder: Embedder | None = None, seed: int = 0) -> None:
        self.llm = llm
        self.embedder = embedder
        self.seed = seed
        self.distinct_prompts = 0
        self._labels: dict[tuple[Prompt, tuple[str, ...]], np.ndarray] = {}
        self._votes: dict[tuple[Prompt, tuple[str, ...], float], np.ndarray] = {}
        self._generations: dict[tuple[Prompt, int, float, int], list[str]] = {}

    def label_logprobs(self, prompts: Sequence[Prompt], answers: Sequence[str]) -> np.ndarray:
        """(n, K) label log-probabilities; each distinct prompt goes to the engine once."""
        if self.llm is None:
            raise AuditError("this mechanism needs a model (`model`)")
        key_answers = tuple(answers)
        missing = list(dict.fromkeys(p for p in prompts if (p, key_answers) not in self._labels))
        if missing:
            scores = np.asarray(self.llm.label_logprobs(missing, key_answers), dtype=np.float64)
            for p, row in zip(missing, scores, strict=True):
                self._labels[(p, key_answers)] = row
            self.distinct_prompts += len(missing)
        return np.stack([self._labels[(p, key_answers)] for p in prompts])

    def vote_probs(
        self, prompts: Sequence[Prompt], answers: Sequence[str], temperature: float, chunk: int = 16
    ) -> np.ndarray:
        """(n, K) probability that a partition's answer, decoded at temperature τ, is each label
        (mechanisms/decoding.py); 1 − row sum = an invalid vote.

        Engines with a tokenizer and full next-token distributions (transformers, vLLM): τ = 1 is
        exp(label_logprobs) (the same product of token probabilities); τ ≠ 1 the decoding equations
        from the distributions after each prompt and each label prefix (one engine call per `chunk`
        prompts; the transformers engine reuses the prompt's KV cache for the prefixes). Engines with
        label scores only (oracle, simulated, HTTP top-k): `label_distribution`."""
        encode = getattr(self.llm, "encode", None)
        if encode is None:
            return label_distribution(self.label_logprobs(prompts, answers), temperature)
        label_ids = [tuple(encode(a)) for a in answers]
        if temperature == 1.0:
            return longest_match(np.exp(self.label_logprobs(prompts, answers)), label_ids)
        key_answers = tuple(answers)
        prefixes = label_prefixes(label_ids)
        missing = list(dict.fromkeys(p for p in prompts if (p, key_answers, temperature) not in self._votes))
        for start in range(0, len(missing), chunk):
            batch = missing[start : start + chunk]
            steps = [replace(p, continuation=p.continuation + prefix) for p in batch for prefix in prefixes]
            dists = iter(self.llm.next_token_logprobs(steps, top_k="all"))  # type: ignore[union-attr]
            self.distinct_prompts += len(steps)
            for p in batch:
                rows = {prefix: next(dists).logprobs for prefix in prefixes}
                start_probs = np.exp(sequence_logprobs(rows, label_ids, temperature))[None, :]
                self._votes[(p, key_answers, temperature)] = longest_match(start_probs, label_ids)[0]
        return np.stack([self._votes[(p, key_answers, temperature)] for p in prompts])

    def generations(
        self, prompts: Sequence[Prompt], n: int, temperature: float, max_new_tokens: int
    ) -> list[list[str]]:
        """`n` sampled outputs per prompt (seeded); each distinct prompt is generated once."""
        if self.llm is None:
            raise AuditError("this mechanism needs a model (`model`)")
        keys = [(p, n, temperature, max_new_tokens) for p in prompts]
        missing = list(dict.fromkeys(k for k in keys if k not in self._generations))
        if missing:
            sampling = Sampling(max_new_tokens, temperature=temperature, seed=self.seed, n=n)
            outs = self.llm.generate([k[0] for k in missing], sampling)
            for k, gens in zip(missing, outs, strict=True):
                self._generations[k] = [g.text.strip() for g in gens]
            self.distinct_prompts += len(missing)
        return [self._generations[k] for k in keys]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.embedder is None:
            raise AuditError("this mechanism needs an embedder")
        return np.asarray(self.embedder.embed(list(texts)), dtype=np.float64)


class Mechanism(ABC):
    """A DP-ICL aggregation mechanism under audit (003 App. 5, 002 Alg. 2).

    Class properties the audit reads instead of switching on names: `gaussian` (a known Gaussian
    mechanism — noise N(0, σ²I) on a statistic of L2 sensitivity Δ₂, then post-processing — whose privacy
    curve is μ-GDP with μ = Δ₂/σ, so the GDP route of bounds.py is a valid lower bound; planted bugs keep
    it), `estimators` (which of bootstrap/direct/exact it supports), `white_box_available`.
    """

    name: ClassVar[str]
    needs_llm: ClassVar[bool] = True
    needs_embedder: ClassVar[bool] = False
    white_box_available: ClassVar[bool] = True
    gaussian: ClassVar[bool] = False
    plants_bugs: ClassVar[bool] = False  # accepts `bug` (mechanisms/bugs.py)
    scales_noise: ClassVar[bool] = False  # accepts `bug: noise_scale` (a Gaussian mechanism with a σ)
    claims: ClassVar[bool] = True  # claims an (ε, δ); False: leakage only, the request's ε is no claim
    estimators: ClassVar[frozenset[str]] = frozenset({"bootstrap", "direct"})
    estimators_note: ClassVar[str] = ""  # why only those, for the request's error message
    call_batch: ClassVar[int | None] = None  # `direct` trials per chunk when calls are slow (http)
    # how its teachers may give their answer (`mechanism.teacher_output`); private voting: also label_logprobs
    teacher_outputs: ClassVar[frozenset[str]] = frozenset({"free_text"})

    def __init__(
        self, *, partitions: int, partitioning: str = "disjoint", theory: Theory | None = None
    ) -> None:
        self.n_partitions = partitions
        self.partitioning = partitioning
        self.theory = theory
        self.noise_factor = 1.0  # `bug: noise_scale`: the release's σ is noise_factor × the calibrated σ
        # whether every partitioning drawn so far (`partition`) put the canary in C1's partitions
        self.canary_included = True
        # set by the kind from its run context; only a mechanism that calls out (http_endpoint) reads them
        self.egress: AllowList | None = None  # where it may call (the service always sets it)
        self.secrets: Callable[[str], str] | None = None  # its headers' secrets; None: ICLAUDIT_SECRET_* only
        self.responses: ResponseStore | None = None  # answered calls, replayed on resume
        self.meter: Meter | None = None  # the audit's budget

    @classmethod
    @abstractmethod
    def from_spec(cls, spec: Any, *, epsilon: float, delta: float) -> Mechanism:
        """The mechanism built from the request's `mechanism` object, its noise calibrated for (ε, δ)."""

    @classmethod
    def context_size(cls, spec: Any) -> int:
        """Exemplars in each neighbouring context: T partitions × shots per partition (default)."""
        return spec.partitions * spec.shots_per_partition

    @property
    def noise_sigma(self) -> float:
        """The standard deviation the release really adds: the calibrated σ × `noise_factor`."""
        assert self.theory is not None and self.theory.sigma is not None
        return self.theory.sigma * self.noise_factor

    def result_extras(self) -> dict:
        """Mechanism-specific fields of the audit result (e.g. the endpoint's call count)."""
        return {}

    def partition(
        self, contexts: NeighbouringContexts, rng: np.random.Generator
    ) -> tuple[list[tuple[Example, ...]], list[tuple[Example, ...]]]:
        """Partitions of C1 and of C0 (same positions, so only the canary's partition differs); records in
        `canary_included` whether C1's partitions hold the canary (contexts.py keeps it in)."""
        blocks = self.blocks(len(contexts.without), contexts.canary_position, rng)
        self.canary_included = self.canary_included and holds(blocks, contexts.canary_position)
        parts_in = [tuple(contexts.with_canary[i] for i in b) for b in blocks]
        parts_out = [tuple(contexts.without[i] for i in b) for b in blocks]
        return parts_in, parts_out

    def prepare(self, query: AuditQuery, source: CleanSource) -> None:
        """Anything the release needs besides the clean statistics (ESA: zero-shot candidates)."""
        return None

    def binary_target(self, query: AuditQuery, source: CleanSource) -> BinaryTarget:
        """What "canary present" means for this mechanism's outputs (default: the query's answer index)."""
        return BinaryTarget(positive=query.positive, negative=query.negative)

    def audit_inputs(self, query: AuditQuery, parts: Sequence[tuple[Example, ...]]) -> list:
        """What `collect` is given per partition: the attack's prompt for it, wrapped (default)."""
        return [self.wrap(query.prompt(p)) for p in parts]

    def wrap(self, prompt: Prompt) -> Prompt:
        """The prompt the mechanism really sends for one partition's audit query (defenses add here)."""
        return prompt

    def blocks(self, n: int, canary_position: int, rng: np.random.Generator) -> list[np.ndarray]:
        """Positions of each partition (disjoint, or disjoint-Poisson; 002 Alg. 3), the canary's position in
        one of them: the claims credit no amplification by subsampling (contexts.py)."""
        return PARTITIONERS[self.partitioning](n, self.n_partitions, rng, keep=canary_position)

    @abstractmethod
    def collect(
        self,
        prompts: Sequence[Any],  # what `audit_inputs` gave (prompts, or an endpoint's calls)
        answers: Sequence[str],
        source: CleanSource,
        n_calls: int,
        rng: np.random.Generator,
    ) -> np.ndarray:
        """`n_calls` clean statistics of one context, one per mechanism call (the non-private 𝓜′)."""

    def collect_pair(
        self,
        prompts: tuple[Sequence[Any], Sequence[Any]],
        answers: Sequence[str],
        source: CleanSource,
        n_calls: int,
        rngs: tuple[np.random.Generator, np.random.Generator],
    ) -> tuple[np.ndarray, np.ndarray]:
        """`n_calls` clean statistics of C1 and of C0 (the `direct` estimator's trials): C1's, then C0's.
        A mechanism whose every trial is a paid call (http_endpoint) interleaves them, so that a budget stop
        keeps the pairs it finished (BudgetExhausted.partial)."""
        return (
            self.collect(prompts[0], answers, source, n_calls, rngs[0]),
            self.collect(prompts[1], answers, source, n_calls, rngs[1]),
        )

    @abstractmethod
    def release(self, clean: np.ndarray, rng: np.random.Generator) -> Release:
        """The private outputs of a batch of calls from their clean statistics (vectorized)."""

    @abstractmethod
    def binary_view(self, release: Release, target: BinaryTarget) -> tuple[np.ndarray, np.ndarray]:
        """(black-box decision bool (m,), white-box score float (m,)), higher score = canary present."""
