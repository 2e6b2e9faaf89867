"""Plain ICL (`none`): one prompt with the whole context, the model's answer released as is.

No noise, no ε: the audit reports leakage only (TPR/FPR, accuracy, μ). Implemented as private
voting with T = 1 partition and σ = 0, so the same collection and attack code applies.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from app.audit.mechanisms.private_voting import PrivateVoting


class PlainICL(PrivateVoting):
    name = "none"
    gaussian = False
    plants_bugs = False
    claims = False  # no noise: a request's ε is no claim (prompt_defense, a subclass, neither)
    estimators = frozenset({"bootstrap", "direct"})
    teacher_outputs = frozenset({"free_text"})  # one model, no teachers: its answer is read as released

    @classmethod
    def from_spec(cls, spec: Any, *, epsilon: float, delta: float) -> PlainICL:
        return cls(temperature=spec.temperature)

    @classmethod
    def context_size(cls, spec: Any) -> int:
        """One prompt holds the whole context: `shots_per_partition` exemplars."""
        return spec.shots_per_partition

    def __init__(self, *, temperature: float = 1.0) -> None:
        super().__init__(partitions=1, theory=None, temperature=temperature)

    def blocks(self, n: int, canary_position: int, rng: np.random.Generator) -> list[np.ndarray]:
        return [np.arange(n)]
