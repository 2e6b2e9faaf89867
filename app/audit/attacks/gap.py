"""GAP attack (Wen et al. 2024; 003 §3.2 baseline, Prompt 4): classify the canary itself; a correct
label counts as "member". Black box: released label = the canary's true label. White box: Ṽ_true −
max_{k≠true} Ṽ_k.
"""

from __future__ import annotations

import numpy as np

from app.audit.attacks.base import AttackOptions, AuditQuery
from app.audit.icl.prompts import MISLABEL
from app.audit.runtime import AuditError
from app.datasets.types import Dataset, Example

MECHANISMS = frozenset({"private_voting", "none", "prompt_defense"})


def label_query(canary: Example, dataset: Dataset, injected: tuple[Example, ...] = ()) -> AuditQuery:
    if dataset.task != "classification" or canary.label is None or canary.label not in dataset.labels:
        raise AuditError(
            "attack.name: gap and brainwash need a classification dataset and a labelled dataset canary"
        )
    return AuditQuery(
        MISLABEL,
        tuple(dataset.labels),
        positive=dataset.labels.index(canary.label),
        negative=None,
        fields={"labels": ", ".join(dataset.labels), "canary": canary.text},
        injected=injected,
    )


def build_query(
    *, canary: Example, dataset: Dataset, spec: AttackOptions, rng: np.random.Generator
) -> AuditQuery:
    return label_query(canary, dataset)
