"""KSA rare-word attack (002 App. E.2): the query asks for a commonly unseen word y1 when the canary is
in the context and a common word y0 otherwise (003 Prompt 3's wording); the audit watches the rare
word's noisy frequency (white box) or whether it is among the released keywords (black box).
Default pair: ("zyzzyva", "ordinary"); `attack.signal_texts` replaces it.
"""

from __future__ import annotations

import numpy as np

from app.audit.attacks.base import AttackOptions, AuditQuery
from app.audit.icl.prompts import SIGNAL_BLACK_BOX
from app.datasets.types import Dataset, Example

MECHANISMS = frozenset({"ksa"})
RARE_WORD_PAIR = ("zyzzyva", "ordinary")


def build_query(
    *, canary: Example, dataset: Dataset, spec: AttackOptions, rng: np.random.Generator
) -> AuditQuery:
    y1, y0 = spec.signal_texts or RARE_WORD_PAIR
    return AuditQuery(
        SIGNAL_BLACK_BOX, (y1, y0), fields={"canary": canary.text, "y1": y1, "y0": y0}, signal_texts=(y1, y0)
    )
