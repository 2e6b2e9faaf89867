"""Brainwash attack (Wen et al. 2024; 003 §4.1 baseline): the canary, randomly mislabelled, is injected
6× into the prompt; if the model still answers the canary's true label, it counts as "member"."""

from __future__ import annotations

import numpy as np

from app.audit.attacks.base import AttackOptions, AuditQuery
from app.audit.attacks.gap import label_query
from app.datasets.types import Dataset, Example

MECHANISMS = frozenset({"private_voting", "none", "prompt_defense"})
INJECTIONS = 6


def build_query(
    *, canary: Example, dataset: Dataset, spec: AttackOptions, rng: np.random.Generator
) -> AuditQuery:
    query = label_query(canary, dataset)
    wrong = [label for label in dataset.labels if label != canary.label]
    mislabelled = Example(text=canary.text, label=wrong[int(rng.integers(len(wrong)))])
    return label_query(canary, dataset, injected=(mislabelled,) * INJECTIONS) if wrong else query
