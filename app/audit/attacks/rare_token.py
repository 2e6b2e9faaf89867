"""Rare-token canary: the canary exemplar is (x, r), x a training record and r a token no
label of the task is and a model never answers zero-shot (default "zyzzyva"; `attack.signal_texts[0]`
replaces it). The query is 003 Prompt 4 on x, listing the task's labels and r, voted over the labels
and r. Without the canary no partition has seen r, so P(vote r | C0) ≈ 0 for every partition; with it
the canary's partition copies r. Black box: ẑ = 1 iff the released answer is r; white box:
Ṽ_r − max_{k≠r} Ṽ_k > τ (003 §3.2 with r as "yes").
"""

from __future__ import annotations

import numpy as np

from app.audit.attacks.base import AttackOptions, AuditQuery
from app.audit.attacks.copy_canary import MECHANISMS as COPY_MECHANISMS
from app.audit.attacks.copy_canary import _classification, label_answers, relabelled
from app.audit.icl.contexts import NeighbouringContexts
from app.datasets.types import Dataset, Example

MECHANISMS = COPY_MECHANISMS
RARE_TOKEN = "zyzzyva"


def plant(
    contexts: NeighbouringContexts,
    dataset: Dataset,
    spec: AttackOptions,
    rng: np.random.Generator,
) -> NeighbouringContexts:
    """The canary exemplar (x, r)."""
    _classification(dataset, contexts.canary)
    return relabelled(contexts, spec.signal_texts[0] if spec.signal_texts else RARE_TOKEN)


def build_query(
    *, canary: Example, dataset: Dataset, spec: AttackOptions, rng: np.random.Generator
) -> AuditQuery:
    assert canary.label is not None
    labels = tuple(label for label in dataset.labels if label != canary.label)
    return label_answers(canary, (*labels, canary.label))
