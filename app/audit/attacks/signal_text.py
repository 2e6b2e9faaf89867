"""Constrained binary generation with signal texts y1/y0 (003 §3.4, Prompts 2–3, Table 3 pairs).

The model must output y1 if the canary is in its context and y0 if not; the black-box query
(Prompt 3) also asks for a random choice when the context is empty, so ESA's zero-shot candidates
contain both. Black box: ẑ = 1 iff the released text is y1 (nearest of emb(y1), emb(y0)). White box
(ESA): ẑ = 1 iff ‖ẽ − emb(y0)‖ − ‖ẽ − emb(y1)‖ > τ; (private voting): Ṽ_y1 − Ṽ_y0 > τ.
"""

from __future__ import annotations

import numpy as np

from app.audit.attacks.base import AttackOptions, AuditQuery
from app.audit.icl.prompts import DEFAULT_SIGNAL_TEXTS, SIGNAL_BLACK_BOX, SIGNAL_WHITE_BOX
from app.datasets.types import Dataset, Example

MECHANISMS = frozenset({"esa", "private_voting", "none", "prompt_defense"})


def build_query(
    *, canary: Example, dataset: Dataset, spec: AttackOptions, rng: np.random.Generator
) -> AuditQuery:
    y1, y0 = spec.signal_texts or DEFAULT_SIGNAL_TEXTS
    template = SIGNAL_WHITE_BOX if spec.threat_model == "white_box" else SIGNAL_BLACK_BOX
    return AuditQuery(
        template, (y1, y0), fields={"canary": canary.text, "y1": y1, "y0": y0}, signal_texts=(y1, y0)
    )
