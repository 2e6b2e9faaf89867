"""Embedding space aggregation, ESA (003 App. 5 Alg. 3; Wu et al. 2024; 002 Alg. 2 "ESA").

Clean statistic: the mean ē = (1/T) Σ_t E(LLM(P_t, q)) of the T partitions' output embeddings
(unit-norm, MiniLM). Release: ẽ = ē + N(0, σ²I_d) with σ for L2 sensitivity 2/T (003 Lemma A.1) or
1 (Wu et al.); the output is the zero-shot candidate (LLM(q) without exemplars, `candidates` of
them) nearest to ẽ (Alg. 3 lines 10–12). White-box view: ẽ itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from app.audit.attacks.base import AuditQuery
from app.audit.mechanisms.base import BinaryTarget, CleanSource, Mechanism, Release, Theory, calibrate
from app.engines.protocol import Prompt


def _sq_dist(x: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances (m, c) between rows of x (m, d) and points (c, d)."""
    return (x * x).sum(1)[:, None] - 2.0 * x @ points.T + (points * points).sum(1)[None, :]


class ESA(Mechanism):
    name = "esa"
    needs_embedder = True
    gaussian = True
    scales_noise = True

    @classmethod
    def from_spec(cls, spec: Any, *, epsilon: float, delta: float) -> ESA:
        from app.audit.accounting.gaussian import esa_sensitivity

        sensitivity = spec.sensitivity or esa_sensitivity(spec.partitions)
        return cls(
            partitions=spec.partitions,
            theory=calibrate(epsilon, delta, sensitivity, spec.calibration),
            temperature=spec.temperature,
            candidates=spec.candidates,
            max_new_tokens=spec.max_new_tokens,
            partitioning=spec.partitioning,
        )

    def __init__(
        self,
        *,
        partitions: int,
        theory: Theory,
        temperature: float = 1.0,
        candidates: int = 8,
        max_new_tokens: int = 32,
        partitioning: str = "disjoint",
    ) -> None:
        super().__init__(partitions=partitions, partitioning=partitioning, theory=theory)
        self.temperature = temperature
        self.n_candidates = candidates
        self.max_new_tokens = max_new_tokens
        self.candidate_texts: list[str] = []
        self.candidate_embeddings = np.zeros((0, 0))

    def prepare(self, query: AuditQuery, source: CleanSource) -> None:
        """Alg. 3 line 10: the zero-shot candidates, LLM(q) with no exemplars."""
        zero_shot = self.wrap(query.prompt(()))
        (texts,) = source.generations([zero_shot], self.n_candidates, self.temperature, self.max_new_tokens)
        self.candidate_texts = texts
        self.candidate_embeddings = source.embed(texts)

    def binary_target(self, query: AuditQuery, source: CleanSource) -> BinaryTarget:
        """emb(y1), emb(y0) of the attack's signal texts (003 §3.4); for the reference-vector view also
        v_ref = mean E(LLM(q | canary alone)) − mean E(LLM(q)) over `candidates` generations each
        (002 App. D's Σ_l o_c − o_c′ up to the factor L, from the auditor's own calibration prompts)."""
        y1, y0 = query.signal_texts or query.answers[:2]
        present, absent = source.embed([y1, y0])
        reference = None
        if query.view == "reference":
            calibration = [self.wrap(query.prompt(query.calibration)), self.wrap(query.prompt(()))]
            with_canary, zero_shot = source.generations(
                calibration, self.n_candidates, self.temperature, self.max_new_tokens
            )
            reference = source.embed(with_canary).mean(0) - source.embed(zero_shot).mean(0)
        return BinaryTarget(present=present, absent=absent, view=query.view, reference=reference)

    def collect(
        self,
        prompts: Sequence[Prompt],
        answers: Sequence[str],
        source: CleanSource,
        n_calls: int,
        rng: np.random.Generator,
    ) -> np.ndarray:
        """`n_calls` clean mean embeddings (n_calls, d): call i averages each partition's i-th sample."""
        outputs = source.generations(prompts, n_calls, self.temperature, self.max_new_tokens)
        unique = list(dict.fromkeys(t for outs in outputs for t in outs))
        emb = source.embed(unique)
        index = {t: i for i, t in enumerate(unique)}
        rows = np.array([[index[t] for t in outs] for outs in outputs])  # (T, n_calls)
        return emb[rows].mean(axis=0)

    def release(self, clean: np.ndarray, rng: np.random.Generator) -> Release:
        noisy = clean + rng.normal(0.0, self.noise_sigma, size=clean.shape)
        answer = np.argmin(_sq_dist(noisy, self.candidate_embeddings), axis=1)
        return Release(answer=answer, white_box=noisy)

    def binary_view(self, release: Release, target: BinaryTarget) -> tuple[np.ndarray, np.ndarray]:
        """Black box: the released candidate is nearer emb(y1) than emb(y0) (= "is y1" when the
        candidates are the signal texts; repeat: nearer the canary's continuation than the refusal).
        White box by `target.view`: "signal" ‖ẽ − emb(y0)‖ − ‖ẽ − emb(y1)‖ (003 §3.4); "repeat"
        −‖ẽ − emb(y1)‖ (003 Prompt 5's distance); "reference" ⟨ẽ, v_ref⟩ (002 App. D);
        "output_only" the distance from ẽ to the released candidate (002 App. E.1, no ẽ needed
        beyond that distance)."""
        if target.present is None or target.absent is None:
            raise ValueError("ESA's binary view needs the signal embeddings (present and absent)")
        anchors = np.stack([target.present, target.absent])
        cand = _sq_dist(self.candidate_embeddings, anchors)
        decision = (cand[:, 0] < cand[:, 1])[release.answer]
        noisy = release.white_box
        if target.view == "reference":
            return decision, noisy @ target.reference
        if target.view == "output_only":
            released = self.candidate_embeddings[release.answer]
            return decision, np.sqrt(np.maximum(((noisy - released) ** 2).sum(1), 0.0))
        d = np.sqrt(np.maximum(_sq_dist(noisy, anchors), 0.0))
        if target.view == "repeat":
            return decision, -d[:, 0]
        return decision, d[:, 1] - d[:, 0]
