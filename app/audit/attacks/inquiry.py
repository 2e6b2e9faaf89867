"""Inquiry attack (003 §3.2, Prompt 1; Wen et al. 2024): ask whether the canary is in the context.

Black box: ẑ = 1 iff the released answer is "Yes". White box: ẑ = 1 iff Ṽ_Yes − Ṽ_No > τ.
"""

from __future__ import annotations

import numpy as np

from app.audit.attacks.base import AttackOptions, AuditQuery
from app.audit.icl.prompts import INQUIRY, INQUIRY_ANSWERS
from app.datasets.types import Dataset, Example

MECHANISMS = frozenset({"private_voting", "none", "prompt_defense"})


def build_query(
    *, canary: Example, dataset: Dataset, spec: AttackOptions, rng: np.random.Generator
) -> AuditQuery:
    return AuditQuery(INQUIRY, INQUIRY_ANSWERS, positive=0, negative=1, fields={"canary": canary.text})
