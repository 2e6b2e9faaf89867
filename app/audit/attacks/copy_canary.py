"""Copy canary (003 Lemma 3.1 reached by copying instead of by instruction following).

The canary exemplar is (x, y*): a training record x relabelled with y*, a label the model would not
give x zero-shot (drawn uniformly from the labels ≠ x's own, the `attack` stream). The audit query
is 003 Prompt 4 on x itself ("classify x", MISLABEL), voted over every label of the dataset: a model
that copies the label of an exemplar whose text equals the query votes y* in the canary's partition
with the canary and x's usual label without it, so the clean votes move by one vote
([1, T−1] against [0, T] once the other partitions agree on x's label). The partitions need only
copy, which a 135M model does and cannot do by following the inquiry instruction.

Black box: ẑ = 1 iff the released label is y*. White box: Ṽ_{y*} − max_{k≠y*} Ṽ_k > τ.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from app.audit.attacks.base import AttackOptions, AuditQuery
from app.audit.icl.contexts import NeighbouringContexts
from app.audit.icl.prompts import MISLABEL
from app.audit.runtime import AuditError
from app.datasets.types import Dataset, Example

MECHANISMS = frozenset({"private_voting", "none", "prompt_defense"})


def relabelled(contexts: NeighbouringContexts, label: str) -> NeighbouringContexts:
    """C1 with the canary exemplar's label replaced by `label` (C0 unchanged; the pair stays neighbouring:
    they still differ in the canary's position only)."""
    canary = replace(contexts.canary, label=label)
    at = contexts.canary_position
    with_canary = (*contexts.with_canary[:at], canary, *contexts.with_canary[at + 1 :])
    return replace(contexts, with_canary=with_canary, canary=canary)


def _classification(dataset: Dataset, canary: Example) -> None:
    if dataset.task != "classification" or len(dataset.labels) < 2:
        raise AuditError("attack.name: copy and rare-token canaries need a classification dataset")
    if canary.label is None:
        raise AuditError("attack.canary: a copy canary is a dataset record (leave attack.canary unset)")


def plant(
    contexts: NeighbouringContexts, dataset: Dataset, spec: AttackOptions, rng: np.random.Generator
) -> NeighbouringContexts:
    """The canary exemplar (x, y*): y* uniform over the labels other than x's own."""
    _classification(dataset, contexts.canary)
    wrong = [label for label in dataset.labels if label != contexts.canary.label]
    return relabelled(contexts, wrong[int(rng.integers(len(wrong)))])


def label_answers(canary: Example, labels: tuple[str, ...]) -> AuditQuery:
    """003 Prompt 4 on the canary's text over `labels`; positive = the canary exemplar's label."""
    assert canary.label is not None
    return AuditQuery(
        MISLABEL,
        labels,
        positive=labels.index(canary.label),
        negative=None,
        fields={"labels": ", ".join(labels), "canary": canary.text},
    )


def build_query(
    *, canary: Example, dataset: Dataset, spec: AttackOptions, rng: np.random.Generator
) -> AuditQuery:
    _classification(dataset, canary)
    return label_answers(canary, tuple(dataset.labels))
