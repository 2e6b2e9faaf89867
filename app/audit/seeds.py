"""One seed tree per audit: `SeedSequence(seed)` spawned once into named, independent streams.

Every source of randomness in an audit takes its own child of the request's seed, so no two stages
share draws (the bootstrap noise never re-uses the draws that built the contexts) and the same seed
gives the same result. The names are fixed and their order never changes: appending a new stream at
the end keeps every existing stream (and so every recorded result) as it was.

- `contexts`: which exemplars form C0 and where the canary goes (contexts.build_contexts);
- `partitions`: the partitioning of the context (disjoint shuffle, disjoint-Poisson);
- `attack`: the attack's own choices (e.g. brainwash's wrong label);
- `pool`: the clean statistics. C1 and C0 draw theirs from two generators in the *same* state
  (common random numbers): a partition whose prompt is the same in both contexts casts the same
  vote in call i of C1 and of C0, so only the canary's partition differs (docs/results/soundness.md);
- `noise_in`, `noise_out`: the release noise of the C1 and C0 trials (bootstrap or direct);
- `threshold`: the split of the scores into selection and held-out halves (thresholds.Split);
- `utility`: the held-out utility queries;
- `generations`: the integer seed passed to the engine for sampled generations (ESA, KSA);
- `power`: reserved (the verdict's power model once drew from it; it is now computed exactly), kept so the
  streams after it stay as they were;
- `pilot`: `attack: auto`'s pilot contexts and partitions (app/audit/design.py), never read by the measurement.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

STREAMS = (
    "contexts",
    "partitions",
    "attack",
    "pool",
    "noise_in",
    "noise_out",
    "threshold",
    "utility",
    "generations",
    "power",
    "pilot",
)


@dataclass(frozen=True)
class SeedTree:
    """The named child `SeedSequence`s of one audit seed (see the module docstring)."""

    seed: int
    children: dict[str, np.random.SeedSequence]

    @classmethod
    def from_seed(cls, seed: int) -> SeedTree:
        spawned = np.random.SeedSequence(seed).spawn(len(STREAMS))
        return cls(seed, dict(zip(STREAMS, spawned, strict=True)))

    def rng(self, name: str) -> np.random.Generator:
        """A fresh generator on stream `name`; two calls give two generators in the same state."""
        return np.random.default_rng(self.children[name])

    def integer(self, name: str) -> int:
        """A 63-bit integer seed drawn from stream `name` (for APIs that take an int seed)."""
        return int(self.children[name].generate_state(1, dtype=np.uint64)[0]) >> 1
