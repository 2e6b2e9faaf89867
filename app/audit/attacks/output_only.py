"""Output-only attack on ESA (002 App. E.1): without the noisy mean embedding, only the released
output and its distance to the privatized embedding (Wu et al. 2024 release the nearest zero-shot
candidate). Score: ‖ẽ − emb(released candidate)‖ — a canary pulls ẽ away from the zero-shot
outputs. It reports in the `white_box` entry (it sees a distance); `black_box` is the signal-text
decision. The query is the signal-text query (003 Prompts 2–3).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from app.audit.attacks import signal_text
from app.audit.attacks.base import AttackOptions, AuditQuery
from app.datasets.types import Dataset, Example

MECHANISMS = frozenset({"esa"})


def build_query(
    *, canary: Example, dataset: Dataset, spec: AttackOptions, rng: np.random.Generator
) -> AuditQuery:
    query = signal_text.build_query(canary=canary, dataset=dataset, spec=spec, rng=rng)
    return replace(query, view="output_only")
