"""DP synthetic text generation (`synthetic_generation`) as a released-text mechanism for the generated-text
audits (attacks/released_text.py): 001 App. C.1 Alg. 1 (Amin et al. 2024, simplified variant, every token
private) over s = `partitions` one-shot prompts, one private exemplar each (001 Table 3's template,
`templates.generation_prompt`, with the exemplar's own label).

Per call the mechanism releases ONE synthetic text of up to T = `max_new_tokens` tokens: per step the
clipped next-token logits of the s prompts are averaged and the token is sampled,

    z̄ = (1/s) Σ_p clip_c(z_p),      x ~ softmax(z̄ / τ)      (app/audit/icl/synthetic.py),

continuing the attack's prefill (the record's prefix / the text before its secret) as the deployed
generator does when asked to continue a given start. The claim (ε, δ) is for remove-one neighbours of the
batch (001 Thm C.7–C.8, the neighbour relation of `kinds/synthetic_generation.py`): τ is solved so that one
text of T private tokens at clip c and batch size s meets it (001 Alg. 3, `rdp.solve_temperature` with
N_gen = 1); `mechanism.temperature` is not used. The audit's C1 is the batch of s prompts holding the record,
C0 the same batch without it: s − 1 prompts whose clipped logits (and, with the SVT, probabilities) are still
summed and divided by s, exactly the neighbour the accounting's sensitivity c/s (and 1/s) covers
(app/audit/icl/synthetic.py). The mean over the s − 1 would move the aggregate up to twice as far.

With `mechanism.svt` the mechanism is Amin et al.'s full algorithm: each step also scores a public prompt
(001 Table 3's instruction and the record's label, no private example, continuing the same prefill); the
sparse vector test (`synthetic.SparseVectorTest`) lets a token spend budget only where the private and public
predictions differ, public tokens are sampled from the public logits at `svt.public_temperature`, and a text
stops after r = `svt.max_private_tokens` private tokens. τ is solved for r private tokens plus the SVT's own
cost (`rdp.solve_temperature` with `svt_noise`, `private_tokens`); the result counts the private tokens.

No noise model is assumed by the audit: black box only, assumption-free Clopper-Pearson bounds
(`gaussian` False), every trial one fresh mechanism call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from app.audit.accounting import rdp
from app.audit.icl.synthetic import SparseVectorTest
from app.audit.mechanisms.base import BinaryTarget, CleanSource, Mechanism, Release, claimed_theory
from app.audit.runtime import AuditError
from app.engines.protocol import Prompt


class SyntheticGeneration(Mechanism):
    name = "synthetic_generation"
    white_box_available = False
    estimators = frozenset({"direct"})
    estimators_note = "synthetic_generation is audited on generated text, every trial a fresh call (direct)"

    def __init__(
        self,
        *,
        batch_size: int,
        clip: float,
        max_new_tokens: int,
        epsilon: float,
        delta: float,
        svt: Any | None = None,
    ) -> None:
        super().__init__(partitions=batch_size, theory=claimed_theory(epsilon, delta))
        self.clip, self.max_new_tokens, self.svt = clip, max_new_tokens, svt
        self.private_tokens = max_new_tokens
        if svt is not None and svt.max_private_tokens is not None:
            self.private_tokens = min(max_new_tokens, svt.max_private_tokens)
        self.temperature, self.alpha, self.epsilon_solved = rdp.solve_temperature(
            target_epsilon=epsilon,
            delta=delta,
            clip=clip,
            batch_size=batch_size,
            sequences=1,
            max_new_tokens=max_new_tokens,
            svt_noise=svt.noise if svt is not None else None,
            private_tokens=self.private_tokens,
        )

    @classmethod
    def from_spec(cls, spec: Any, *, epsilon: float, delta: float) -> SyntheticGeneration:
        return cls(
            batch_size=spec.partitions,
            clip=spec.clip,
            max_new_tokens=spec.max_new_tokens,
            epsilon=epsilon,
            delta=delta,
            svt=spec.svt,
        )

    def sparse_vector_test(self, rng: np.random.Generator) -> SparseVectorTest | None:
        """A fresh test for one released text (its threshold drawn from `rng`), or None (simplified)."""
        if self.svt is None:
            return None
        return SparseVectorTest(
            threshold=self.svt.threshold,
            noise=self.svt.noise,
            public_temperature=self.svt.public_temperature,
            max_private_tokens=self.private_tokens,
            rng=rng,
        )

    @classmethod
    def context_size(cls, spec: Any) -> int:
        """s one-shot prompts, one exemplar each."""
        return spec.partitions

    def result_extras(self) -> dict:
        return {
            "synthetic_generation": {
                "batch_size": self.n_partitions,
                "clip": self.clip,
                "temperature": self.temperature,
                "max_new_tokens": self.max_new_tokens,
                "alpha": self.alpha,
                "epsilon_theory_solved": self.epsilon_solved,
                "neighbours": "remove-one at fixed batch size (C0 = C1 without the record's prompt, over s)",
                "variant": "svt" if self.svt is not None else "simplified",
                "private_tokens_claimed": self.private_tokens,
                "svt": self.svt.model_dump() if self.svt is not None else None,
            }
        }

    def _not_votes(self) -> AuditError:
        return AuditError(
            "synthetic_generation releases text; audit it with a generated-text attack (attack.score)"
        )

    def collect(
        self,
        prompts: Sequence[Prompt],
        answers: Sequence[str],
        source: CleanSource,
        n_calls: int,
        rng: np.random.Generator,
    ) -> np.ndarray:
        raise self._not_votes()

    def release(self, clean: np.ndarray, rng: np.random.Generator) -> Release:
        raise self._not_votes()

    def binary_view(self, release: Release, target: BinaryTarget) -> tuple[np.ndarray, np.ndarray]:
        raise self._not_votes()
