"""Exemplar pools, canaries, neighbouring contexts and partitions — everything seeded.

Neighbouring contexts (003 §3.2, 002 Alg. 1): C0 = n exemplars drawn from the training split;
C1 = C0 with the exemplar at `canary_position` replaced by the canary. The canary is a further
training exemplar (003) or a user-given text such as 002's "The sun rises in the west.".

Partitions are lists of positions into the context, shared by C1 and C0, so with fixed partitions
exactly one partition differs between the two contexts, the one holding the canary. Disjoint-Poisson
partitioning (002 Alg. 3) can leave a position out of every partition; the audit keeps the canary in
(`keep`): no mechanism's claimed ε credits amplification by subsampling (their ε is the noise's ε for a record
in a partition), so a partitioning that leaves the record out is one the claim does not need and the audit
could not see a leak in. The partitioning is drawn once per audit (or per context pair): a claim without
amplification holds for every fixed partitioning, so one that holds the record is enough to test it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.audit.runtime import AuditError
from app.datasets.types import Dataset, Example


@dataclass(frozen=True)
class NeighbouringContexts:
    """C0 (`without`) and C1 (`with_canary`): equal length, equal except at `canary_position`."""

    without: tuple[Example, ...]
    with_canary: tuple[Example, ...]
    canary: Example
    canary_position: int


def build_contexts(
    dataset: Dataset, n_exemplars: int, rng: np.random.Generator, canary_text: str | None = None
) -> NeighbouringContexts:
    """Draw C0 from `dataset.train` and replace one uniformly chosen exemplar by the canary (C1)."""
    need = n_exemplars + (0 if canary_text else 1)
    if len(dataset.train) < need:
        raise AuditError(
            f"dataset {dataset.name!r} has {len(dataset.train)} training rows; the audit needs {need} "
            "(partitions × shots_per_partition exemplars plus the canary)"
        )
    chosen = rng.choice(len(dataset.train), size=need, replace=False)
    without = tuple(dataset.train[i] for i in chosen[:n_exemplars])
    canary = Example(text=canary_text) if canary_text else dataset.train[chosen[n_exemplars]]
    position = int(rng.integers(n_exemplars))
    with_canary = (*without[:position], canary, *without[position + 1 :])
    return NeighbouringContexts(without, with_canary, canary, position)


def partition_disjoint(
    n: int, parts: int, rng: np.random.Generator, keep: int | None = None
) -> list[np.ndarray]:
    """A seeded shuffle of positions 0…n−1 split into `parts` disjoint near-equal blocks (003 Alg. 2 l.1).
    Every position is used, `keep` (the canary's) included."""
    if parts < 1 or parts > n:
        raise AuditError(f"cannot split {n} exemplars into {parts} non-empty partitions")
    return [np.sort(block) for block in np.array_split(rng.permutation(n), parts)]


MAX_POISSON_DRAWS = 10_000


def partition_disjoint_poisson(
    n: int, parts: int, rng: np.random.Generator, keep: int | None = None
) -> list[np.ndarray]:
    """Disjoint Poisson sampling (002 App. E Alg. 3), with the position `keep` (the canary's) always used.

    For k = 1…M: p_k = min(1, (|D|/M)/|R|); each exemplar left in the residual pool R joins
    partition k with probability p_k; the chosen ones leave R. Sizes are random (a partition can be
    empty), and an exemplar can be left out of every partition: p_M < 1 whenever more than |D|/M exemplars
    remain for the last partition (at |D| = 8, M = 4 a third of the partitionings leave some exemplar out and
    9 % leave out a given one; 40 % and 4 % at |D| = 40).

    With `keep`, Alg. 3 is drawn again until a partition holds that position, i.e. a draw of Alg. 3
    conditioned on the record being used (module docstring: the claims do not credit subsampling); after
    MAX_POISSON_DRAWS misses (each draw misses with probability ≤ (1 − 1/M)^M < e^{−1}, as every p_k ≥ 1/M)
    the position joins a uniformly chosen partition.
    """
    if parts < 1:
        raise AuditError("partitions must be ≥ 1")
    for _ in range(MAX_POISSON_DRAWS if keep is not None else 1):
        blocks = _disjoint_poisson_draw(n, parts, rng)
        if keep is None or any(keep in block for block in blocks):
            return blocks
    assert keep is not None  # without one to keep, the first draw was returned
    k = int(rng.integers(parts))
    blocks[k] = np.sort(np.append(blocks[k], keep))
    return blocks


def _disjoint_poisson_draw(n: int, parts: int, rng: np.random.Generator) -> list[np.ndarray]:
    """One draw of 002 Alg. 3 over positions 0…n−1."""
    residual = np.arange(n)
    blocks = []
    for _ in range(parts):
        p = 1.0 if residual.size == 0 else min(1.0, (n / parts) / residual.size)
        take = rng.random(residual.size) < p
        blocks.append(residual[take])
        residual = residual[~take]
    return blocks


def holds(blocks: Sequence[np.ndarray], position: int) -> bool:
    """Whether some partition holds `position` (the canary's)."""
    return any(position in block for block in blocks)


PARTITIONERS = {"disjoint": partition_disjoint, "disjoint_poisson": partition_disjoint_poisson}


def format_exemplar(example: Example) -> str:
    """One exemplar as prompt text: `Text: …` plus `Label: …` or `Summary: …` when present."""
    lines = [f"Text: {example.text}"]
    if example.label is not None:
        lines.append(f"Label: {example.label}")
    if example.summary is not None:
        lines.append(f"Summary: {example.summary}")
    return "\n".join(lines)


def format_context(exemplars: Sequence[Example]) -> str:
    """Exemplars joined by blank lines (the `{context}` of every audit prompt)."""
    return "\n\n".join(format_exemplar(e) for e in exemplars)
