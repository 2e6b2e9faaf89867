"""Private voting: report-noisy-max with Gaussian noise (003 App. 5 Alg. 2; 002 Alg. 2 "RNM").

Clean statistic: the vote vector V ∈ ℕ^K of the T partitions (003 Alg. 2 lines 1–6); a partition
whose answer falls outside the label set casts no vote. Release: Ṽ = V + N(0, σ²I_K), output
argmax_k Ṽ_k (lines 7–10). Neighbouring contexts move one vote, i.e. two counts by 1: Δ₂ = √2, so
classic σ = √2·√(2 ln(1.25/δ))/ε = 2√(ln(1.25/δ))/ε. White-box view: Ṽ itself, scored by the attack
as s_w(Ṽ) = Ṽ_y+ − w·Ṽ_other (`binary_view`; w = 1 is 003 §3.2's score, w = 0 the Ṽ_y+ count score of
app/audit/attacks/count_score.py).

Teacher output (`mechanism.teacher_output`, part of the system under audit): `free_text` (default) —
each teacher generates an answer string at the mechanism temperature, parsed to a label (the longest label
it starts with, else no vote; mechanisms/decoding.py); `label_logprobs` — the deployment reads each
teacher's label from the label tokens' log-probabilities ℓ_k = log P(t_k | prompt), the argmax at
temperature 0 (as many DP-ICL classification deployments read their teachers; 003 §3.4's constrained
output) and a draw from softmax_k(ℓ_k/τ) at τ > 0, so every teacher casts a valid vote. The noise and
Δ₂ = √2 are the same (each teacher still casts at most one vote), so the claim is the same.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.audit.mechanisms import bugs
from app.audit.mechanisms.base import (
    BinaryTarget,
    CleanSource,
    Mechanism,
    Release,
    Theory,
    calibrate,
    draw_votes,
    label_distribution,
)
from app.engines.protocol import Prompt

DEFAULT_SENSITIVITY = math.sqrt(2.0)


@dataclass(frozen=True)
class VoteTarget(BinaryTarget):
    """A vote target with the white-box score's weight on the other label (`AuditQuery.other_weight`)."""

    other_weight: float = 1.0


class PrivateVoting(Mechanism):
    name = "private_voting"
    gaussian = True
    plants_bugs = True
    scales_noise = True
    estimators = frozenset({"bootstrap", "direct", "exact"})
    teacher_outputs = frozenset({"free_text", "label_logprobs"})

    @classmethod
    def from_spec(cls, spec: Any, *, epsilon: float, delta: float) -> PrivateVoting:
        from app.audit.accounting.gaussian import VOTE_SENSITIVITY

        theory = calibrate(epsilon, delta, spec.sensitivity or VOTE_SENSITIVITY, spec.calibration)
        return cls(
            partitions=spec.partitions,
            theory=theory,
            temperature=spec.temperature,
            partitioning=spec.partitioning,
            bug=spec.bug,
            bug_factor=spec.bug_factor,
            teacher_output=spec.teacher_output,
        )

    def __init__(
        self,
        *,
        partitions: int,
        theory: Theory | None,
        temperature: float = 1.0,
        partitioning: str = "disjoint",
        bug: str | None = None,
        bug_factor: float | None = None,
        teacher_output: str = "free_text",
    ) -> None:
        super().__init__(partitions=partitions, partitioning=partitioning, theory=theory)
        self.temperature = temperature
        self.teacher_output = teacher_output
        self.bug = bug
        self.std = 0.0 if theory is None else bugs.noise_std(theory, bug, partitions, bug_factor)

    def blocks(self, n: int, canary_position: int, rng: np.random.Generator) -> list[np.ndarray]:
        blocks = super().blocks(n, canary_position, rng)
        if self.bug == "canary_in_every_partition":
            return bugs.overlapping_blocks(blocks, canary_position)
        return blocks

    def label_probs(
        self, prompts: Sequence[Prompt], answers: Sequence[str], source: CleanSource
    ) -> np.ndarray:
        """Each partition's probability of voting each answer, (T, K): free-text teachers decode their
        answer at the mechanism temperature (`CleanSource.vote_probs`, mechanisms/decoding.py); label
        log-probability teachers vote by `votes_from_scores` (rows sum to 1)."""
        if self.teacher_output == "free_text":
            return source.vote_probs(prompts, answers, self.temperature)
        return self.votes_from_scores(source.label_logprobs(prompts, answers))

    def votes_from_scores(self, scores: np.ndarray) -> np.ndarray:
        """Vote probabilities (n, K) from the labels' token-sequence log-probabilities ℓ alone (n, K).

        `label_logprobs` teachers: P(vote k) = 1[k = argmax_j ℓ_j] at τ = 0 (first on ties), else
        softmax_k(ℓ_k/τ). `free_text` teachers: `label_distribution` (the mass outside the labels is an
        invalid vote), for an attack that holds label scores only (attacks/likelihood.py)."""
        scores = np.asarray(scores, dtype=np.float64)
        if self.teacher_output == "free_text":
            return label_distribution(scores, self.temperature)
        if self.temperature == 0:
            probs = np.zeros_like(scores)
            probs[np.arange(len(scores)), np.argmax(scores, axis=1)] = 1.0
            return probs
        scaled = scores / self.temperature
        scaled -= scaled.max(axis=1, keepdims=True)
        weights = np.exp(scaled)
        return weights / weights.sum(axis=1, keepdims=True)

    def collect(
        self,
        prompts: Sequence[Prompt],
        answers: Sequence[str],
        source: CleanSource,
        n_calls: int,
        rng: np.random.Generator,
    ) -> np.ndarray:
        """`n_calls` clean vote vectors (n_calls, K), each partition's vote a seeded draw from its exact
        label distribution (forward passes = distinct prompts, not n_calls × T)."""
        return draw_votes(self.label_probs(prompts, answers, source), n_calls, rng)

    def release(self, clean: np.ndarray, rng: np.random.Generator) -> Release:
        """Ṽ = V + noise (through `bugs.vote_noise`, so a planted bug acts here); answer = argmax Ṽ."""
        clean = np.asarray(clean, dtype=np.float64)
        noisy = clean + bugs.vote_noise(clean, self.std, self.bug, rng) if self.std > 0 else clean.copy()
        answer = np.argmax(noisy, axis=1)
        if self.std == 0:  # no noise (plain ICL): a call with no valid vote releases nothing
            answer = np.where(clean.sum(axis=1) > 0, answer, -1)
        return Release(answer=answer, white_box=noisy)

    def binary_target(self, query: Any, source: CleanSource) -> BinaryTarget:
        """The query's answer index, its compared label and its white-box weight w (`AuditQuery.other_weight`)."""
        return VoteTarget(
            positive=query.positive,
            negative=query.negative,
            other_weight=float(getattr(query, "other_weight", 1.0)),
        )

    def binary_view(self, release: Release, target: BinaryTarget) -> tuple[np.ndarray, np.ndarray]:
        """Black box: released label = target (003 §3.2: ẑ = 1 iff y = 'yes').
        White box: s_w = Ṽ_target − w·Ṽ_other (003 §3.2: ẑ = 1 iff Ṽ_yes − Ṽ_no > τ, w = 1; Ṽ_other the
        strongest other label when the target names none). w = 0: Ṽ_target alone, the Neyman-Pearson score
        when the partition without the canary casts no vote (V_in − V_out = e_target; attacks/count_score.py)."""
        noisy = release.white_box
        decision = release.answer == target.positive
        weight = float(getattr(target, "other_weight", 1.0))
        if weight == 0.0:
            return decision, noisy[:, target.positive].copy()
        if target.negative is not None:
            other = noisy[:, target.negative]
        else:
            other = np.max(np.delete(noisy, target.positive, axis=1), axis=1)
        return decision, noisy[:, target.positive] - weight * other
