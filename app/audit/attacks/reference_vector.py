"""Reference-vector attack on ESA (002 §3.4.1 and App. D; 003's white-box baseline for generation).

The query is the signal-text query (003 Prompts 2–3; the "canary-corresponding prompt" of 002);
v_ref points from the outputs without the canary to those with it (built by `ESA.binary_target`
from the auditor's own calibration prompts: the canary alone vs no context), and the score is the
projection ⟨ẽ, v_ref⟩ of the noisy mean embedding. Black box as for signal texts.
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
    return replace(query, view="reference", calibration=(canary,))
